#pragma once
/// Bitfield attention mask (dissertation §3.4.2, Fig 3.4): one 64-bit word per token.
/// This header is the ONE definition of the predicate and of the tile-skip test: the
/// context-parallel planner (schedulers/planners/cp/cp_mask.hpp, cp_workload*.cpp), the CUDA
/// kernels (kernels/cuda/) and the CPU references (kernels/reference/) all include it, so the
/// planner's workloads and the kernels' masks cannot drift apart. Header-only and
/// host+device (core/host_device.hpp), so core still links no CUDA.
///
///   bit 0        LLM / text                      } "modality bits" (kModalityBits):
///   bits 1..61   modality encoders (A, B, ...)   } which modalities' tokens this token sees
///   bit 62       sink  (Loom extension, lambda mask: a key every windowed query may see)
///   bit 63       causal (the token attends only to keys at or before its position)
///
/// Decode predicate (the seeds give none: [AMBIG] in the reading notes). Loom reads a
/// token's modality bits as "the modalities it may attend to" and requires the *key's*
/// modality bits to be a non-empty subset of the query's:
///
///   may_attend(q, k) =  kb != 0  &&  (kb & ~qb) == 0                 qb, kb = modality bits
///                    && (!causal(q) || pos_k <= pos_q)
///                    && (window == 0 || !causal(q) || pos_q - pos_k < window || sink(k))
///
/// This reproduces the §3.4.2 example exactly: encoder-A tokens (bit A only, no causal
/// bit) see only encoder-A tokens, in both directions; text tokens (causal, all bits) see
/// every earlier token. The notes' alternative "(qb & kb) != 0" would let an image token
/// see text tokens (their words share bit A), contradicting the example, so it is not used.
/// A word with no modality bits is padding: it attends to nothing and nobody attends to it.
/// The sliding window is a mask-level parameter (no bit pattern can express it) and binds
/// causal queries only; the kernels run without one (window 0), where the sink bit is inert.
#include <cstdint>

#include "core/host_device.hpp"

namespace loom {

inline constexpr std::uint64_t kTextBit = 1ULL << 0;
inline constexpr std::uint64_t kSinkBit = 1ULL << 62;
inline constexpr std::uint64_t kCausalBit = 1ULL << 63;
inline constexpr std::uint64_t kModalityBits = (1ULL << 62) - 1;  ///< bits 0..61
inline constexpr int kMaxModalityBits = 62;

/// The bit of modality `index` (0 = LLM/text, 1.. = encoders). Index must be < 62.
constexpr std::uint64_t modality_bit(int index) {
  return 1ULL << index;
}

/// The word-level part of the predicate (modality subset test), without positions.
LOOM_HD constexpr bool modalities_compatible(std::uint64_t query_word, std::uint64_t key_word) {
  const std::uint64_t qb = query_word & kModalityBits;
  const std::uint64_t kb = key_word & kModalityBits;
  return kb != 0 && (kb & ~qb) == 0;
}

/// The predicate above for a query word at position pos_q and a key word at pos_k, with
/// an optional sliding window (0 = none).
LOOM_HD bool may_attend(std::uint64_t mask_q, std::uint64_t mask_k, std::int64_t pos_q,
                        std::int64_t pos_k, std::int64_t window = 0) {
  if (!modalities_compatible(mask_q, mask_k)) return false;
  if ((mask_q & kCausalBit) == 0) return true;
  if (pos_k > pos_q) return false;
  return window == 0 || pos_q - pos_k < window || (mask_k & kSinkBit) != 0;
}

/// A summary of the words of one tile of consecutive tokens, enough to prove that a
/// (query tile, key tile) pair has no attending pair at all, so its work can be skipped
/// (the block skipping of §3.3.2.1: "if the attention mask block is full of zeros, the
/// block is skipped"). Sound for window 0 (the kernels); a window only removes pairs.
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

}  // namespace loom
