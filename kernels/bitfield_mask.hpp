#pragma once
/// Bitfield attention mask (dissertation §3.4.2, Fig 3.4): one uint64 word per token.
/// This header is the ONE definition of the predicate; the CUDA kernels (kernels/cuda/)
/// and the CPU references (kernels/reference/) both include it, so they cannot drift.
///
///   bits 0..61   modality bits: bit 0 the LLM (text), bits 1.. the modality encoders
///   bit 62       reserved (sink bit of the sliding-window masks in schedulers/cp_mask.hpp)
///   bit 63       causal bit: the token attends only to keys at or before its position
///
/// Predicate: query q may attend key k iff
///     kb != 0  &&  (kb & ~qb) == 0  &&  (!causal(q) || pos_k <= pos_q)
/// with qb, kb the modality bits of q and k: the key's modalities must be a non-empty
/// subset of the query's. This is the reading that reproduces the §3.4.2 example: encoder-A
/// tokens (bit A only, no causal bit) attend only to encoder-A tokens, in both directions;
/// text tokens (all modality bits, causal) attend to every earlier token. The looser
/// "(qb & kb) != 0" would let an image token see the text tokens that follow it (they
/// share bit A), contradicting the example. It is also the decode schedulers/cp_mask.hpp
/// uses for context-parallel planning, so the planner and the kernels agree.
/// A word with no modality bits is padding: it attends to nothing and nobody attends to it.
#include <cstdint>

#if defined(__CUDACC__)
#define LOOM_HD __host__ __device__ __forceinline__
#else
#define LOOM_HD inline
#endif

namespace loom::kernels {

inline constexpr std::uint64_t kCausalBit = 1ULL << 63;
inline constexpr std::uint64_t kModalityBits = (1ULL << 62) - 1;  ///< bits 0..61

/// The bit of modality `index` (0 = LLM/text, 1.. = encoders); index < 62.
constexpr std::uint64_t modality_bit(int index) {
  return 1ULL << index;
}

/// The §3.4.2 predicate for a query word at position pos_q and a key word at pos_k.
LOOM_HD bool may_attend(std::uint64_t mask_q, std::uint64_t mask_k, std::int64_t pos_q,
                        std::int64_t pos_k) {
  const std::uint64_t qb = mask_q & kModalityBits;
  const std::uint64_t kb = mask_k & kModalityBits;
  const bool modality_ok = kb != 0 && (kb & ~qb) == 0;
  const bool causal_ok = (mask_q & kCausalBit) == 0 || pos_k <= pos_q;
  return modality_ok && causal_ok;
}

/// A summary of the words of one tile of consecutive tokens, enough to prove that a
/// (query tile, key tile) pair has no attending pair at all, so its work can be skipped
/// (the block skipping of §3.3.2.1: "if the attention mask block is full of zeros, the
/// block is skipped").
struct TileSummary {
  // No member initialisers: the CUDA kernels keep summaries in __shared__ memory, which
  // cannot run constructors. Start from empty().
  std::uint64_t any_bits;  ///< OR of the tile's modality bits
  std::uint64_t all_bits;  ///< AND of the modality bits of its non-padding tokens
  bool any_key;            ///< some token has modality bits (is not padding)
  bool all_causal;         ///< every non-padding token has the causal bit
  std::int64_t first_pos;  ///< position of the tile's first token
  std::int64_t last_pos;   ///< position of the tile's last token (< first_pos: no token)

  /// The summary of a tile with no tokens yet.
  LOOM_HD static TileSummary empty() { return {0, kModalityBits, false, true, 0, -1}; }

  /// Folds in one token's word at position pos (tokens may be added in any order).
  LOOM_HD void add(std::uint64_t word, std::int64_t pos) {
    if (last_pos < first_pos) first_pos = last_pos = pos;
    first_pos = pos < first_pos ? pos : first_pos;
    last_pos = pos > last_pos ? pos : last_pos;
    const std::uint64_t bits = word & kModalityBits;
    if (bits == 0) return;  // padding attends to nothing
    any_bits |= bits;
    all_bits &= bits;
    any_key = true;
    all_causal = all_causal && (word & kCausalBit) != 0;
  }
};

/// True when no query of tile q may attend any key of tile k, proven from the summaries:
///   (a) either side is all padding;
///   (b) every query is causal and every key lies after the last query;
///   (c) a pair needs kb subset of qb, and every key has all_bits(k) inside its kb, so if
///       all_bits(k) has a bit that no query has (outside any_bits(q)), no pair matches.
/// Conservative: a tile it does not skip may still be empty; one it skips always is.
LOOM_HD bool tile_is_empty(const TileSummary& q, const TileSummary& k) {
  if (!q.any_key || !k.any_key) return true;
  if (q.all_causal && k.first_pos > q.last_pos) return true;
  return (k.all_bits & ~q.any_bits) != 0;
}

}  // namespace loom::kernels
