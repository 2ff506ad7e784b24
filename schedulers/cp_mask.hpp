#pragma once
/// Bitfield attention mask (dissertation §3.4.2, Fig 3.4): one 64-bit word per token.
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
///   attends(q, k) =  kb != 0  &&  (kb & ~qb) == 0                    qb, kb = modality bits
///                 && (!causal(q) || k <= q)
///                 && (window == 0 || !causal(q) || q - k < window || sink(k))
///
/// This reproduces the §3.4.2 example exactly: encoder-A tokens (bit A only, no causal
/// bit) see only encoder-A tokens, in both directions; text tokens (causal, all bits) see
/// every earlier token. The notes' alternative "(qb & kb) != 0" would let an image token
/// see text tokens (their words share bit A), contradicting the example, so it is not used.
/// A token with no modality bits is padding: it attends to nothing and nobody attends to it.
/// The sliding window is a mask-level parameter (no bit pattern can express it); it binds
/// causal queries only.
#include <cstdint>
#include <string>
#include <vector>

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

struct AttentionMask {
  std::vector<std::uint64_t> words;  ///< one per token, in sequence order
  std::int64_t window = 0;           ///< sliding window for causal queries; 0 = none

  std::int64_t size() const { return static_cast<std::int64_t>(words.size()); }
  /// The decode predicate above, for tokens at positions q and k.
  bool attends(std::int64_t q, std::int64_t k) const;
};

/// The word-level part of the predicate (modality subset test), without positions.
constexpr bool modalities_compatible(std::uint64_t query_word, std::uint64_t key_word) {
  const std::uint64_t qb = query_word & kModalityBits;
  const std::uint64_t kb = key_word & kModalityBits;
  return kb != 0 && (kb & ~qb) == 0;
}

/// Mask families. The first four are the dissertation's Fig 3.5 / §3.5.4 (causal and its
/// multimodal variants); the last three are DCP's patterns used in Table 3.4. Their exact
/// geometry is not given in the seeds; see cp_mask_generators.cpp for the reconstructions.
enum class MaskKind {
  kCausal,           ///< plain LLM causal mask
  kPrefix,           ///< Fig 3.5a: modality tokens prepended, text after them
  kEmbedded,         ///< Fig 3.5b: modality segments at random places inside the text
  kPacked,           ///< Fig 3.5c: several embedded sequences packed, each isolated
  kLambda,           ///< DCP "lambda": sink tokens + causal sliding window
  kCausalBlockwise,  ///< DCP: causal within blocks; the last block sees every block
  kSharedQuestion,   ///< DCP: one question, several answers that see it and themselves
};

/// Names as the CLI spells them: causal, prefix, embedded, packed, lambda,
/// causal-blockwise, shared-question.
const char* to_string(MaskKind kind);
/// Throws InputError naming the valid kinds.
MaskKind parse_mask_kind(const std::string& name);
std::vector<std::string> mask_kind_names();

/// Generator parameters. Every field has a default; fields a kind does not use are ignored.
struct MaskSpec {
  MaskKind kind = MaskKind::kCausal;
  std::int64_t seq = 65536;         ///< tokens
  double modality_fraction = 0.5;   ///< prefix/embedded/packed: share of non-text tokens
  int modalities = 2;               ///< encoders (vision, audio in §3.5.1)
  int segments = 4;                 ///< embedded/packed: segments per modality per sequence
  int packed_sequences = 4;         ///< packed: sequences in one pack
  std::int64_t sink_tokens = 64;    ///< lambda: attention-sink tokens at the start
  std::int64_t window = 4096;       ///< lambda: causal sliding window, tokens
  int blocks = 8;                   ///< causal-blockwise: blocks
  int answers = 4;                  ///< shared-question: answers
  double question_fraction = 0.25;  ///< shared-question: share of tokens in the question
  std::uint64_t seed = 1;           ///< embedded/packed: placement of modality segments
};

/// Builds the mask. Deterministic in the spec (own PRNG arithmetic, no <random>
/// distributions, so results agree across standard libraries). Throws InputError naming
/// the field for out-of-range parameters (seq < 1, fractions outside [0, 1), too many
/// bits for the 62 modality bits, ...).
AttentionMask generate_mask(const MaskSpec& spec);

}  // namespace loom
