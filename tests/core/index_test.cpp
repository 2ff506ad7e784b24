// Typed indices (core/index.hpp): what the types refuse matters as much as what they do.
#include "core/index.hpp"

#include <gtest/gtest.h>

#include <concepts>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "schedulers/lowering/programs.hpp"

namespace loom {
namespace {

template <class Table, class Key>
constexpr bool indexable_by = requires(Table table, Key key) {
  table[key];
};

// A per-rank table takes a RankId and nothing else: not an int, not another kind of id.
static_assert(indexable_by<PerRank<int>, RankId>);
static_assert(!indexable_by<PerRank<int>, int>);
static_assert(!indexable_by<PerRank<int>, std::size_t>);
static_assert(!indexable_by<PerRank<int>, PipelineRank>);
static_assert(!indexable_by<PerStage<int>, PipelineRank>);
static_assert(!indexable_by<PerPipelineRank<int>, StageId>);
// No implicit conversion either way, and no comparison across kinds.
static_assert(!std::is_convertible_v<int, RankId>);
static_assert(!std::is_convertible_v<RankId, int>);
static_assert(!std::is_convertible_v<PipelineRank, RankId>);
static_assert(!std::equality_comparable_with<RankId, StageId>);

TEST(Index, ATableIsIndexedAndIteratedByItsIds) {
  PerRank<int> busy(3, 0);
  for (const RankId r : busy.ids()) busy[r] = 10 * r.value();
  EXPECT_EQ(busy[2_rank], 20);
  EXPECT_EQ(busy.ssize(), 3);
  EXPECT_EQ(busy.next_id(), 3_rank);
  EXPECT_TRUE(busy.contains(2_rank));
  EXPECT_FALSE(busy.contains(3_rank));
  EXPECT_FALSE(busy.contains(RankId{-1}));
  EXPECT_THROW(static_cast<void>(busy.at(3_rank)), std::out_of_range);
  std::vector<int> seen;
  for (const int v : busy) seen.push_back(v);
  EXPECT_EQ(seen, (std::vector<int>{0, 10, 20}));
}

TEST(Index, IdsOrderOffsetAndPrintAsTheirNumbers) {
  EXPECT_LT(1_rank, 2_rank);
  EXPECT_EQ(1_rank + 2, 3_rank);
  EXPECT_EQ(5_rank - 2_rank, 3);
  EXPECT_EQ(to_string(StageId{7}), "7");
  EXPECT_EQ(nlohmann::json(4_rank).dump(), "4");
  EXPECT_EQ(nlohmann::json::parse("5").get<RankId>(), 5_rank);
  const std::set<RankId> ranks{2_rank, 0_rank, 1_rank};
  EXPECT_EQ(*ranks.begin(), 0_rank);
  int count = 0;
  for (const StageId s : IdRange<StageId>(-2)) count += s.value() + 1;  // empty
  EXPECT_EQ(count, 0);
}

}  // namespace
}  // namespace loom
