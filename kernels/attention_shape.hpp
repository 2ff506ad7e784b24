#pragma once
/// Shape and memory layout of one bitfield-mask attention call, shared by the CUDA kernels
/// and the CPU reference.
///
/// Layout (token-major, as a fused QKV projection writes it; no transposes needed):
///   Q element (b, t, h, d)  at  Q[(b * tokens + t) * ld_q + h * head_dim + d]
///   K, V with kv head g in place of h (ld_k, ld_v); O, dO like Q with ld_o
///   mask word of token t of sample b  at  mask[b * tokens + t]      (position = t)
///   lse, delta of (b, h, t)           at  lse[(b * heads + h) * tokens + t]
/// Grouped-query attention: query head h reads kv head h / (heads / kv_heads).
#include <cmath>
#include <cstdint>

#include "core/host_device.hpp"  // LOOM_HD

namespace loom::kernels {

/// Tokens per tile, in both the query and key dimension: the granularity of block
/// skipping (a tile pair whose mask is provably empty costs nothing).
inline constexpr int kAttentionTile = 32;
/// The CUDA kernels keep a head's row per warp lane-striped; 4 floats per lane.
inline constexpr int kMaxHeadDim = 128;

struct AttentionShape {
  int batch = 1;
  int tokens = 0;
  int heads = 1;
  int kv_heads = 1;                                     ///< divides heads
  int head_dim = 0;                                     ///< <= kMaxHeadDim for the CUDA kernels
  std::int64_t ld_q = 0, ld_k = 0, ld_v = 0, ld_o = 0;  ///< row strides in elements

  /// Softmax scale 1/sqrt(head_dim) (Vaswani et al.; what every model here uses).
  float scale() const { return 1.0f / std::sqrt(static_cast<float>(head_dim)); }
  LOOM_HD int group() const { return heads / kv_heads; }
  LOOM_HD int tiles() const { return (tokens + kAttentionTile - 1) / kAttentionTile; }

  /// A dense shape: Q and O with heads * head_dim columns, K and V with kv_heads * head_dim.
  static AttentionShape dense(int batch, int tokens, int heads, int kv_heads, int head_dim) {
    AttentionShape s;
    s.batch = batch;
    s.tokens = tokens;
    s.heads = heads;
    s.kv_heads = kv_heads;
    s.head_dim = head_dim;
    s.ld_q = s.ld_o = static_cast<std::int64_t>(heads) * head_dim;
    s.ld_k = s.ld_v = static_cast<std::int64_t>(kv_heads) * head_dim;
    return s;
  }
};

}  // namespace loom::kernels
