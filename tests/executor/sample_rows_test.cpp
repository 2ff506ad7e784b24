// The packing plans both model states run: a module input packed from several producers
// and its gradient unpacked back must move every row to where the other put it.
#include "executor/sample_rows.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace loom::exec {
namespace {

// The picture of sample_rows.hpp: part 0 has 2 | 1 rows, part 1 has 1 | 2.
const std::vector<std::vector<int>> kParts = {{2, 1}, {1, 2}};

std::vector<int> apply(const std::vector<RowBlock>& blocks, int rows,
                       const std::vector<std::vector<int>>& sources) {
  std::vector<int> out(static_cast<size_t>(rows), -1);
  for (const RowBlock& b : blocks) {
    for (int r = 0; r < b.rows; ++r)
      out[static_cast<size_t>(b.to_row + r)] =
          sources[static_cast<size_t>(b.part)][static_cast<size_t>(b.from_row + r)];
  }
  return out;
}

TEST(SampleRows, PacksEachSampleThePartsInOrder) {
  const PackPlan plan = pack_samples(kParts, 2);
  EXPECT_EQ(plan.lengths, (std::vector<int>{3, 3}));
  // Rows labelled 10 x part + row: a0 a0 b0 | a1 b1 b1.
  const std::vector<std::vector<int>> parts = {{0, 1, 2}, {10, 11, 12}};
  EXPECT_EQ(apply(plan.blocks, 6, parts), (std::vector<int>{0, 1, 10, 2, 11, 12}));
}

TEST(SampleRows, UnpackInvertsPack) {
  const std::vector<std::vector<int>> packed = {{0, 1, 10, 2, 11, 12}};
  for (int k = 0; k < 2; ++k) {
    std::vector<RowBlock> blocks = unpack_part(kParts, k);
    for (RowBlock& b : blocks) b.part = 0;  // read from the one packed tensor
    const std::vector<int> want = k == 0 ? std::vector<int>{0, 1, 2} : std::vector<int>{10, 11, 12};
    EXPECT_EQ(apply(blocks, 3, packed), want) << "part " << k;
  }
}

TEST(SampleRows, ResampledLengthsRound) {
  EXPECT_EQ(resampled_lengths({4, 6, 1}, 0.25), (std::vector<int>{1, 2, 0}));
}

}  // namespace
}  // namespace loom::exec
