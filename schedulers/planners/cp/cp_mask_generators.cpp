// Mask generators for the patterns of dissertation Fig 3.5 and DCP's patterns of Table 3.4.
// The seeds show the masks only as pictures (not in the text), so every geometry below is
// a reconstruction, labelled as such in docs/context-parallelism.md. Legend of the
// pictures (query rows, key columns, 16 tokens): t text, A/B encoders, # attends.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <span>
#include <string>

#include "core/errors.hpp"
#include "schedulers/planners/cp/cp_mask.hpp"

namespace loom {
namespace {

// splitmix64: fixed arithmetic, so masks are identical across standard libraries.
struct Rng {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, n) (modulo bias < n / 2^64, irrelevant here).
  std::int64_t below(std::int64_t n) {
    return static_cast<std::int64_t>(next() % static_cast<std::uint64_t>(n));
  }
};

void require(bool ok, const std::string& field, const std::string& what) {
  if (ok) return;
  std::string flag = field;  // the CLI spells fields with dashes
  std::replace(flag.begin(), flag.end(), '_', '-');
  throw InputError("mask parameter " + field + " (--" + flag + "): " + what);
}

/// Splits `total` into `parts` near-equal sizes (the first ones one larger).
std::vector<std::int64_t> equal_parts(std::int64_t total, std::int64_t parts) {
  std::vector<std::int64_t> sizes;
  for (std::int64_t i = 0; i < parts; ++i)
    sizes.push_back(total / parts + (i < total % parts ? 1 : 0));
  return sizes;
}

/// Appends `tokens` tokens that all carry `word`.
void append_run(std::vector<std::uint64_t>& words, std::int64_t tokens, std::uint64_t word) {
  std::fill_n(std::back_inserter(words), tokens, word);
}

/// One multimodal sequence with its own bit group: bit `base` is its text, bits
/// base+1..base+modalities its encoders. Text tokens are causal and carry every bit of
/// the group (§3.4.2: "all modality bits set"); encoder tokens carry only their own bit and
/// no causal bit, so an encoder's tokens attend to each other bidirectionally.
///   prefix:   AAAABBBBtttttttt        embedded:  ttAAttttBBttAAtB
void append_multimodal(std::vector<std::uint64_t>& words, std::int64_t length, const MaskSpec& spec,
                       int base, bool prepend, Rng& rng) {
  const std::int64_t modality_tokens =
      std::llround(spec.modality_fraction * static_cast<double>(length));
  std::uint64_t group = modality_bit(base);
  for (int m = 1; m <= spec.modalities; ++m) group |= modality_bit(base + m);
  const std::uint64_t text_word = group | kCausalBit;

  // Segments of encoder tokens: `segments` per modality (one when prepended).
  const std::int64_t per_modality = prepend ? 1 : spec.segments;
  std::vector<std::pair<std::uint64_t, std::int64_t>> pieces;  // (word, tokens)
  std::vector<std::int64_t> by_modality = equal_parts(modality_tokens, spec.modalities);
  for (int m = 1; const std::int64_t tokens : by_modality) {  // encoder m has bit base + m
    for (std::int64_t size : equal_parts(tokens, per_modality))
      if (size > 0) pieces.emplace_back(modality_bit(base + m), size);
    ++m;
  }
  const std::int64_t text_tokens = length - modality_tokens;
  if (prepend) {
    for (const auto& [word, size] : pieces) append_run(words, size, word);
    append_run(words, text_tokens, text_word);
    return;
  }
  // Embedded: segments in random order at random cut points of the text (§3.5.1: "the
  // placement of the modality data is randomly assigned").
  for (std::int64_t i = std::ssize(pieces); i > 1; --i)
    std::iter_swap(pieces.begin() + (i - 1), pieces.begin() + rng.below(i));
  std::vector<std::int64_t> cuts;
  for (std::size_t i = 0; i < pieces.size(); ++i) cuts.push_back(rng.below(text_tokens + 1));
  std::sort(cuts.begin(), cuts.end());
  std::int64_t text_done = 0;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    append_run(words, cuts[i] - text_done, text_word);
    text_done = cuts[i];
    append_run(words, pieces[i].second, pieces[i].first);
  }
  append_run(words, text_tokens - text_done, text_word);
}

/// Packed (Fig 3.5c): `packed_sequences` embedded sequences of random lengths (0.5x to
/// 1.5x the mean) back to back. Each gets its own bit group so no token attends across
/// sequences -- which needs (modalities + 1) bits per sequence out of the 62.
void generate_packed(std::vector<std::uint64_t>& words, const MaskSpec& spec, Rng& rng) {
  const int group = spec.modalities + 1;
  require(static_cast<std::int64_t>(spec.packed_sequences) * group <= kMaxModalityBits,
          "packed_sequences",
          "packed_sequences x (modalities + 1) must be <= 62 (one bit group per sequence)");
  std::vector<double> weights;
  double sum = 0;
  for (int s = 0; s < spec.packed_sequences; ++s) {
    weights.push_back(0.5 + static_cast<double>(rng.below(1001)) / 1000.0);
    sum += weights.back();
  }
  std::int64_t placed = 0;
  for (int s = 0; const double weight : weights) {
    std::int64_t length =
        s + 1 == spec.packed_sequences
            ? spec.seq - placed
            : static_cast<std::int64_t>(static_cast<double>(spec.seq) * weight / sum);
    append_multimodal(words, length, spec, s * group, false, rng);
    placed += length;
    ++s;
  }
}

/// Causal blockwise (DCP; reconstruction): `blocks` equal blocks, causal inside each;
/// the last block also sees every earlier block (in-context examples + the query).
///   ##..........  block i has bit i; the last block has all bits
///   ####........
///   ....##......
///   ....####....
///   ############
void generate_causal_blockwise(std::vector<std::uint64_t>& words, const MaskSpec& spec) {
  require(spec.blocks >= 1 && spec.blocks <= kMaxModalityBits, "blocks", "must be in [1, 62]");
  std::vector<std::int64_t> sizes = equal_parts(spec.seq, spec.blocks);
  const std::uint64_t all = spec.blocks == 62 ? kModalityBits : (1ULL << spec.blocks) - 1;
  for (int b = 0; const std::int64_t size : sizes) {
    const std::uint64_t bits = b + 1 == spec.blocks ? all : modality_bit(b);
    append_run(words, size, bits | kCausalBit);
    ++b;
  }
}

/// Shared question (DCP; reconstruction): a question then `answers` answers; each answer
/// sees the question and itself (causal), not the other answers.
///   question bit 0; answer i bits {0, i}
void generate_shared_question(std::vector<std::uint64_t>& words, const MaskSpec& spec) {
  require(spec.answers >= 1 && spec.answers < kMaxModalityBits, "answers", "must be in [1, 61]");
  require(spec.question_fraction > 0 && spec.question_fraction < 1, "question_fraction",
          "must be in (0, 1)");
  const auto question = std::max<std::int64_t>(
      1, std::llround(spec.question_fraction * static_cast<double>(spec.seq)));
  require(spec.seq - question >= spec.answers, "answers", "more answers than tokens left");
  append_run(words, question, kTextBit | kCausalBit);
  std::vector<std::int64_t> sizes = equal_parts(spec.seq - question, spec.answers);
  for (int a = 1; const std::int64_t size : sizes) {  // answer a has bits {0, a}
    append_run(words, size, kTextBit | modality_bit(a) | kCausalBit);
    ++a;
  }
}

void check_multimodal(const MaskSpec& spec) {
  require(spec.modality_fraction >= 0 && spec.modality_fraction < 1, "modality_fraction",
          "must be in [0, 1)");
  require(spec.modalities >= 1 && spec.modalities < kMaxModalityBits, "modalities",
          "must be in [1, 61]");
  require(spec.segments >= 1, "segments", "must be >= 1");
  require(spec.packed_sequences >= 1, "packed_sequences", "must be >= 1");
}

}  // namespace

AttentionMask generate_mask(const MaskSpec& spec) {
  require(spec.seq >= 1 && spec.seq <= (std::int64_t{1} << 32), "seq", "must be in [1, 2^32]");
  AttentionMask mask;
  mask.words.reserve(static_cast<std::size_t>(spec.seq));
  Rng rng{spec.seed};
  switch (spec.kind) {
    case MaskKind::kCausal:
      append_run(mask.words, spec.seq, kTextBit | kCausalBit);
      break;
    case MaskKind::kPrefix:
    case MaskKind::kEmbedded:
      check_multimodal(spec);
      append_multimodal(mask.words, spec.seq, spec, 0, spec.kind == MaskKind::kPrefix, rng);
      break;
    case MaskKind::kPacked:
      check_multimodal(spec);
      generate_packed(mask.words, spec, rng);
      break;
    case MaskKind::kLambda:
      // Lambda (DCP, after LM-Infinite; reconstruction): causal, each query sees the
      // first `sink_tokens` tokens and the last `window` tokens up to itself.
      require(spec.window >= 1, "window", "must be >= 1");
      require(spec.sink_tokens >= 0, "sink_tokens", "must be >= 0");
      append_run(mask.words, spec.seq, kTextBit | kCausalBit);
      for (std::uint64_t& word : std::span(mask.words).first(static_cast<size_t>(spec.sink_tokens)))
        word |= kSinkBit;
      mask.window = spec.window;
      break;
    case MaskKind::kCausalBlockwise:
      generate_causal_blockwise(mask.words, spec);
      break;
    case MaskKind::kSharedQuestion:
      generate_shared_question(mask.words, spec);
      break;
  }
  return mask;
}

}  // namespace loom
