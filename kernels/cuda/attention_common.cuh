#pragma once
// Helpers shared by the attention kernels (attention.cu, attention_backward.cu): the tile
// geometry, warp reductions, the device-side tile summary and shared-memory tile loads.
#include <cstdint>

#include "core/bitfield_mask.hpp"
#include "kernels/attention_shape.hpp"

namespace loom::kernels::attention_detail {

inline constexpr int kWarps = 8;
inline constexpr int kThreads = kWarps * 32;
inline constexpr int kRowsPerWarp = kAttentionTile / kWarps;  // 4
inline constexpr int kPerLane = kMaxHeadDim / 32;             // 4 head-dim elements per lane
inline constexpr unsigned kFull = 0xffffffffu;
static_assert(kAttentionTile == 32, "one tile token per warp lane");

__device__ inline float warp_sum(float x) {
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(kFull, x, offset);
  return x;
}

__device__ inline float warp_max(float x) {
  for (int offset = 16; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(kFull, x, offset));
  return x;
}

__device__ inline std::uint64_t warp_or(std::uint64_t x) {
  for (int offset = 16; offset > 0; offset /= 2) x |= __shfl_xor_sync(kFull, x, offset);
  return x;
}

__device__ inline std::uint64_t warp_and(std::uint64_t x) {
  for (int offset = 16; offset > 0; offset /= 2) x &= __shfl_xor_sync(kFull, x, offset);
  return x;
}

/// Called by one whole warp: lane t holds the word of token first + t (0 past the end).
/// Equals summarize_tiles() of the reference (same fields, same padding rule).
__device__ inline TileSummary warp_tile_summary(std::uint64_t word, int first, int tokens) {
  const std::uint64_t bits = word & kModalityBits;
  const bool key = bits != 0;
  TileSummary sum = TileSummary::empty();
  sum.any_bits = warp_or(bits);
  sum.all_bits = warp_and(key ? bits : kModalityBits);
  sum.any_key = __any_sync(kFull, key);
  sum.all_causal = __all_sync(kFull, !key || (word & kCausalBit) != 0);
  sum.first_pos = first;
  sum.last_pos = min(first + kAttentionTile, tokens) - 1;
  return sum;
}

struct Index {
  AttentionShape s;
  __device__ inline std::int64_t row(int b, int t) const {
    return static_cast<std::int64_t>(b) * s.tokens + t;
  }
  __device__ inline std::int64_t stat(int b, int h, int t) const {
    return (static_cast<std::int64_t>(b) * s.heads + h) * s.tokens + t;
  }
};

/// Loads rows [first, first + 32) of head `head` from a token-major tensor into shared
/// memory with row pitch `pitch`; rows past the end are zero.
__device__ inline void load_tile(float* dst, int pitch, const float* src, std::int64_t ld, int head,
                                 const Index& at, int b, int first) {
  const int dim = at.s.head_dim;
  for (int e = threadIdx.x; e < kAttentionTile * dim; e += kThreads) {
    const int r = e / dim, d = e % dim, t = first + r;
    dst[r * pitch + d] = t < at.s.tokens ? src[at.row(b, t) * ld + head * dim + d] : 0.0f;
  }
}

/// Warp 0 loads a tile's mask words into `words` and its summary into `sum`.
__device__ inline void load_words(std::uint64_t* words, TileSummary* sum, const std::uint64_t* mask,
                                  const Index& at, int b, int first) {
  if (threadIdx.x >= 32) return;
  const int t = first + static_cast<int>(threadIdx.x);
  const std::uint64_t word = t < at.s.tokens ? mask[at.row(b, t)] : 0;
  words[threadIdx.x] = word;
  const TileSummary summary = warp_tile_summary(word, first, at.s.tokens);
  if (threadIdx.x == 0) *sum = summary;
}

__device__ inline float row_dot(const float* a, const float* b, int dim) {
  float acc = 0.0f;
  for (int d = 0; d < dim; ++d) acc = fmaf(a[d], b[d], acc);
  return acc;
}

}  // namespace loom::kernels::attention_detail
