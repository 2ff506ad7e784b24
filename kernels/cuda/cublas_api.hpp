#pragma once
/// cuBLAS, loaded on first use instead of at process start. Linked, it makes every `loom`
/// process run cuBLASLt 13's static initialisers (0.3 s of `loom --help`, `perf record`),
/// though only the CUDA executor's GEMMs call it.
#include <cublas_v2.h>

namespace loom::kernels {

/// The cuBLAS entry points Loom calls (cublas_v2.h maps the plain names to the _v2 ones).
struct CublasApi {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasSgemm_v2) sgemm = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
};

/// The library (the build's cuBLAS by path, else its soname on the loader's search path),
/// loaded on the first call. Throws CudaError naming the library and the loader's reason if
/// it or one of the entry points is missing.
const CublasApi& cublas();

}  // namespace loom::kernels
