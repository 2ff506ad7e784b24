#pragma once
/// LOOM_HD marks a small function that both host code and CUDA device code call (the
/// bitfield-mask predicate, activation formulas, attention shapes): one definition, two
/// callers. Under nvcc it is `__host__ __device__ __forceinline__`; under a plain C++
/// compiler the CUDA qualifiers vanish and it is just `inline`, so core/ stays free of
/// CUDA (DESIGN.md dependency rules: core depends on nothing of ours).
#if defined(__CUDACC__)
#define LOOM_HD __host__ __device__ __forceinline__
#else
#define LOOM_HD inline
#endif
