// Bitfield attention mask: the decode predicate (dissertation §3.4.2, Fig 3.4) and the
// mask generators' geometry.
#include "schedulers/planners/cp/cp_mask.hpp"

#include <gtest/gtest.h>

#include "core/errors.hpp"

namespace loom {
namespace {

constexpr std::uint64_t kA = modality_bit(1);
constexpr std::uint64_t kB = modality_bit(2);
constexpr std::uint64_t kText = kTextBit | kA | kB | kCausalBit;

/// Fig 3.4: t0 t1 text, t2 t3 encoder A, t4 t5 text.
AttentionMask figure_3_4() {
  return AttentionMask{{kText, kText, kA, kA, kText, kText}, 0};
}

TEST(CpMask, EncoderTokensSeeOnlyTheirEncoderInBothDirections) {
  const AttentionMask m = figure_3_4();
  EXPECT_TRUE(m.attends(2, 3));  // A sees later A: no causal bit
  EXPECT_TRUE(m.attends(3, 2));
  EXPECT_FALSE(m.attends(2, 0));  // A does not see text, although text words carry bit A
  EXPECT_FALSE(m.attends(3, 4));
}

TEST(CpMask, TextTokensSeeEveryEarlierTokenOnly) {
  const AttentionMask m = figure_3_4();
  EXPECT_TRUE(m.attends(4, 2));  // text sees earlier encoder tokens
  EXPECT_TRUE(m.attends(4, 0));
  EXPECT_TRUE(m.attends(4, 4));   // and itself
  EXPECT_FALSE(m.attends(4, 5));  // never a later token
  EXPECT_FALSE(m.attends(0, 2));  // nor a later encoder token
}

TEST(CpMask, PaddingAttendsNothingAndIsNeverAttended) {
  const AttentionMask m{{kText, 0, kText}, 0};
  EXPECT_FALSE(m.attends(2, 1));
  EXPECT_FALSE(m.attends(1, 0));
  EXPECT_FALSE(m.attends(1, 1));
}

TEST(CpMask, WindowBindsCausalQueriesExceptForSinks) {
  AttentionMask m{std::vector<std::uint64_t>(10, kTextBit | kCausalBit), 3};
  m.words[0] |= kSinkBit;
  EXPECT_TRUE(m.attends(9, 7));   // 9 - 7 < 3
  EXPECT_FALSE(m.attends(9, 6));  // outside the window
  EXPECT_TRUE(m.attends(9, 0));   // sink
}

TEST(CpMask, PlansWithTheKernelsPredicate) {
  // The planner's workloads must count exactly the pairs the kernels compute: with the
  // window the kernels do not have set to 0, attends() is the kernels' may_attend.
  for (const std::string& name : mask_kind_names()) {
    MaskSpec spec;
    spec.kind = parse_mask_kind(name);
    spec.seq = 300;
    spec.sink_tokens = 8;
    spec.window = 50;
    AttentionMask m = generate_mask(spec);
    m.window = 0;
    for (std::int64_t q = 0; q < m.size(); q += 7)
      for (std::int64_t k = 0; k < m.size(); k += 3)
        ASSERT_EQ(m.attends(q, k), may_attend(m.words[q], m.words[k], q, k)) << name;
  }
}

TEST(CpMask, GeneratorsProduceTheRequestedLengthsAndShares) {
  for (const std::string& name : mask_kind_names()) {
    MaskSpec spec;
    spec.kind = parse_mask_kind(name);
    spec.seq = 5000;
    EXPECT_EQ(generate_mask(spec).size(), 5000) << name;
  }
  MaskSpec spec;
  spec.kind = MaskKind::kEmbedded;
  spec.seq = 10000;
  spec.modality_fraction = 0.3;
  const AttentionMask m = generate_mask(spec);
  std::int64_t encoder = 0;
  for (std::uint64_t w : m.words) encoder += (w & kCausalBit) == 0;
  EXPECT_EQ(encoder, 3000);
}

TEST(CpMask, PrefixPutsEveryEncoderTokenFirst) {
  MaskSpec spec;
  spec.kind = MaskKind::kPrefix;
  spec.seq = 1000;
  spec.modality_fraction = 0.4;
  const AttentionMask m = generate_mask(spec);
  for (std::int64_t i = 0; i < 1000; ++i)
    EXPECT_EQ((m.words[static_cast<std::size_t>(i)] & kCausalBit) != 0, i >= 400) << i;
}

TEST(CpMask, PackedSequencesDoNotSeeEachOther) {
  MaskSpec spec;
  spec.kind = MaskKind::kPacked;
  spec.seq = 2000;
  const AttentionMask m = generate_mask(spec);
  // The last token is text of the last sequence; the first token belongs to the first.
  EXPECT_FALSE(m.attends(1999, 0));
  EXPECT_TRUE(m.attends(1999, 1998));
}

TEST(CpMask, DcpPatterns) {
  MaskSpec spec;
  spec.seq = 800;
  spec.kind = MaskKind::kCausalBlockwise;
  spec.blocks = 4;  // blocks of 200; the last sees all
  AttentionMask m = generate_mask(spec);
  EXPECT_FALSE(m.attends(250, 150));
  EXPECT_TRUE(m.attends(250, 200));
  EXPECT_TRUE(m.attends(799, 0));
  spec.kind = MaskKind::kSharedQuestion;
  spec.answers = 2;
  spec.question_fraction = 0.5;  // question 0..399, answers 400..599 and 600..799
  m = generate_mask(spec);
  EXPECT_TRUE(m.attends(700, 10));
  EXPECT_FALSE(m.attends(700, 450));
  EXPECT_TRUE(m.attends(450, 400));
}

TEST(CpMask, GeneratorsAreDeterministicInTheSeed) {
  MaskSpec spec;
  spec.kind = MaskKind::kPacked;
  spec.seq = 20000;
  const AttentionMask a = generate_mask(spec);
  EXPECT_EQ(a.words, generate_mask(spec).words);
  spec.seed = 2;
  EXPECT_NE(a.words, generate_mask(spec).words);
}

TEST(CpMask, BadParametersNameTheField) {
  MaskSpec spec;
  spec.kind = MaskKind::kPacked;
  spec.packed_sequences = 30;  // 30 x 3 bits > 62
  try {
    generate_mask(spec);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("packed_sequences"), std::string::npos);
  }
  spec.kind = MaskKind::kCausal;
  spec.seq = 0;
  EXPECT_THROW(generate_mask(spec), InputError);
  EXPECT_THROW(parse_mask_kind("diagonal"), InputError);
}

}  // namespace
}  // namespace loom
