#pragma once
/// Bitfield-mask attention on the GPU (dissertation §3.4.2), fp32, forward and backward,
/// with block skipping: a (query tile, key tile) pair whose mask is provably empty
/// (tile_is_empty in core/bitfield_mask.hpp) is neither loaded nor computed.
/// Same layout, predicate and results as kernels/reference/attention_ref.hpp.
/// Requires head_dim <= kMaxHeadDim. All pointers are device pointers; launches are
/// asynchronous on `stream` and checked (CudaError).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/attention_shape.hpp"

namespace loom::kernels {

/// Writes `word` into mask[0, n): a uniform mask (e.g. every token causal text) built on
/// the device, in stream order, without a host copy.
void fill_mask(std::int64_t n, std::uint64_t word, std::uint64_t* mask, cudaStream_t stream);

/// O and lse (see attention_forward_ref).
void attention_forward(const AttentionShape& s, const float* q, const float* k, const float* v,
                       const std::uint64_t* mask, float* o, float* lse, cudaStream_t stream);

/// delta = rowsum(dO * O), one value per (sample, head, token).
void attention_delta(const AttentionShape& s, const float* o, const float* d_o, float* delta,
                     cudaStream_t stream);

/// dQ, dK, dV (overwritten). Two launches, no atomics (deterministic): one walks key
/// tiles for dK and dV, one walks query tiles for dQ (FlashAttention-2's split).
void attention_backward(const AttentionShape& s, const float* q, const float* k, const float* v,
                        const std::uint64_t* mask, const float* lse, const float* delta,
                        const float* d_o, float* dq, float* dk, float* dv, cudaStream_t stream);

}  // namespace loom::kernels
