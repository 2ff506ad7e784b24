#pragma once
/// Attention masks for context-parallel planning: a bitfield word per token (dissertation
/// §3.4.2, Fig 3.4; the bit layout and the decode predicate live in core/bitfield_mask.hpp,
/// shared with the attention kernels) plus the mask-level sliding window, and the
/// generators of the mask families the CP experiments use.
#include <cstdint>
#include <iterator>
#include <string>
#include <vector>

#include "core/bitfield_mask.hpp"

namespace loom {

struct AttentionMask {
  std::vector<std::uint64_t> words;  ///< one per token, in sequence order
  std::int64_t window = 0;           ///< sliding window for causal queries; 0 = none

  std::int64_t size() const { return std::ssize(words); }
  /// may_attend (core/bitfield_mask.hpp) for the tokens at positions q and k, with this
  /// mask's window.
  bool attends(std::int64_t q, std::int64_t k) const;
};

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
