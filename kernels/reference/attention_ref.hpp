#pragma once
/// CPU reference of bitfield-mask attention (dissertation §3.4.2), forward and backward, in
/// plain C++ float. It runs the same tiled algorithm as kernels/cuda/attention.cu (online
/// softmax over key tiles, tile pairs skipped when tile_is_empty) so the kernels can be
/// compared against it element by element, and it is itself checked against a dense-mask
/// implementation and finite differences (tests/kernels/attention_ref_test.cpp).
///
/// Tensors follow AttentionShape's layout. Rows whose mask lets them attend to nothing get
/// O = 0, lse = -inf and zero gradients.
#include <cstdint>

#include "core/bitfield_mask.hpp"
#include "kernels/attention_shape.hpp"

namespace loom::kernels {

/// Work done by one call: tile pairs visited and skipped by block skipping.
struct AttentionStats {
  std::int64_t tile_pairs = 0;  ///< (query tile, key tile, head, sample) pairs in total
  std::int64_t skipped = 0;     ///< of which proven empty and skipped
};

/// Throws std::invalid_argument when the shape is inconsistent (non-positive sizes,
/// kv_heads not dividing heads, strides shorter than a row of heads).
void check_attention_shape(const AttentionShape& s);

/// O = softmax(scale * Q K^T masked) V per (sample, head), and lse = the log-sum-exp of
/// each row's masked scores (kept for the backward).
AttentionStats attention_forward_ref(const AttentionShape& s, const float* q, const float* k,
                                     const float* v, const std::uint64_t* mask, float* o,
                                     float* lse);

/// delta(b, h, t) = sum_d dO * O (FlashAttention-2's D_i; the softmax backward's row term).
void attention_delta_ref(const AttentionShape& s, const float* o, const float* d_o, float* delta);

/// dQ, dK, dV (overwritten) from dO, with lse and delta from the calls above:
///   P = exp(scale QK^T - lse), dV = P^T dO, dP = dO V^T, dS = P (dP - delta),
///   dQ = scale dS K, dK = scale dS^T Q   (summed over a kv head's query-head group).
AttentionStats attention_backward_ref(const AttentionShape& s, const float* q, const float* k,
                                      const float* v, const std::uint64_t* mask, const float* lse,
                                      const float* delta, const float* d_o, float* dq, float* dk,
                                      float* dv);

/// The tile pairs a forward (or backward) call visits and skips for this mask, without
/// computing anything: equal to the stats attention_forward_ref returns.
AttentionStats attention_tile_stats(const AttentionShape& s, const std::uint64_t* mask);

/// Per-tile summaries of one sample's mask words (tile i covers tokens
/// [i * kAttentionTile, ...)); what both the reference and the kernels skip on.
void summarize_tiles(const std::uint64_t* mask, int tokens, TileSummary* out);

}  // namespace loom::kernels
