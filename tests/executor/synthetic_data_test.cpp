// The synthetic data both executor backends feed: what the gradient check relies on is
// that a sample's rows depend on the sample alone, never on the microbatch it rides in.
#include "executor/synthetic_data.hpp"

#include <gtest/gtest.h>

namespace loom::exec {
namespace {

std::vector<Sample> three_samples() {
  const std::map<std::string, int> tokens[] = {
      {{"text", 3}, {"image", 5}}, {{"text", 2}}, {{"text", 4}, {"image", 1}}};
  std::vector<Sample> out(3);
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].id = static_cast<int>(i);
    out[i].tokens = tokens[i];
  }
  return out;
}

TEST(SyntheticData, ASamplesRowsDoNotDependOnItsMicrobatch) {
  const std::vector<Sample> samples = three_samples();
  const std::vector<SampleId> batch = {SampleId{0}, SampleId{1}, SampleId{2}};
  const std::vector<SampleId> last = {SampleId{2}};
  const Matrix together =
      synthetic_data(7, 1, "text", batch, modality_lengths(samples, batch, "text"), 4);
  const Matrix alone =
      synthetic_data(7, 1, "text", last, modality_lengths(samples, last, "text"), 4);
  ASSERT_EQ(together.rows, 9);
  ASSERT_EQ(alone.rows, 4);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) EXPECT_EQ(together.at(5 + r, c), alone.at(r, c)) << r << "," << c;
}

TEST(SyntheticData, KeysSeedsAndModalitiesGiveDifferentValuesInRange) {
  const std::vector<SampleId> ids = {SampleId{0}};
  const std::vector<int> lengths = {3};
  const Matrix base = synthetic_data(7, 1, "image", ids, lengths, 8);
  const Matrix other_key = synthetic_data(7, -1 - 1, "image", ids, lengths, 8);
  const Matrix other_seed = synthetic_data(8, 1, "image", ids, lengths, 8);
  const Matrix other_modality = synthetic_data(7, 1, "target", ids, lengths, 8);
  EXPECT_NE(base.data, other_key.data);
  EXPECT_NE(base.data, other_seed.data);
  EXPECT_NE(base.data, other_modality.data);
  EXPECT_EQ(base.data, synthetic_data(7, 1, "image", ids, lengths, 8).data);  // pure
  for (float v : base.data) {
    EXPECT_GE(v, -1.0F);
    EXPECT_LT(v, 1.0F);
  }
}

TEST(SyntheticData, LengthsAreTheSamplesTokensOfTheModality) {
  const std::vector<Sample> samples = three_samples();
  EXPECT_EQ(modality_lengths(samples, {SampleId{0}, SampleId{1}, SampleId{2}}, "image"),
            (std::vector<int>{5, 0, 1}));
  EXPECT_EQ(modality_lengths(samples, {SampleId{2}, SampleId{0}}, "text"),
            (std::vector<int>{4, 3}));
}

}  // namespace
}  // namespace loom::exec
