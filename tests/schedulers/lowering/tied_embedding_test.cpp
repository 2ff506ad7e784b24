// Megatron-LM's tied embedding under pipeline parallelism (schedulers/lowering/
// tied_embedding.hpp), on the Narayanan et al. 39.1B GPT shrunk to two replicas: the LM
// head's stage keeps a copy of the embedding and the copies' gradients are all-reduced
// between the first and last stage of every replica, after the data-parallel all-reduce.
#include <gtest/gtest.h>

#include <variant>

#include "test_support.hpp"

namespace loom {
namespace {

constexpr double kVocab = 51200, kHidden = 8192, kTp = 8, kFp16 = 2;
/// Bytes of one GPU's shard of the embedding's gradients (gradient_bytes_per_param = 2).
constexpr double kEmbeddingGradientBytes = kVocab * kHidden / kTp * 2;

std::vector<const Collective*> all_reduces(const Schedule& s, int rank) {
  std::vector<const Collective*> out;
  for (const Op& op : s.programs[RankId{rank}]) {
    if (const auto* c = std::get_if<Collective>(&op)) out.push_back(c);
  }
  return out;
}

TEST(TiedEmbedding, TheHeadsStageKeepsACopyAndTheCopiesAreAllReducedPerReplica) {
  const auto study = test::megatron_gpt();
  const Schedule& s = study->schedule;
  ASSERT_EQ(s.num_ranks(), 4);  // 2 stages x 2 replicas
  for (int d = 0; d < 2; ++d) {
    const int first = 2 * d, last = 2 * d + 1;
    // Both stages hold 24 identical layers and one copy of the embedding.
    EXPECT_DOUBLE_EQ(s.static_memory[RankId{first}].parameters,
                     s.static_memory[RankId{last}].parameters);
    EXPECT_DOUBLE_EQ(s.static_memory[RankId{first}].optimizer,
                     s.static_memory[RankId{last}].optimizer);
    for (int rank : {first, last}) {
      const auto reduces = all_reduces(s, rank);
      ASSERT_EQ(reduces.size(), 2u) << "rank " << rank;
      // The data-parallel all-reduce comes first and carries the copy's gradients too.
      EXPECT_EQ(s.group_members(reduces[0]->group).size(), 2u);
      EXPECT_DOUBLE_EQ(reduces[0]->bytes, all_reduces(s, first)[0]->bytes);
      // Then the embedding all-reduce, over this replica's first and last stage.
      EXPECT_EQ(s.group_members(reduces[1]->group),
                (std::vector<RankId>{RankId{first}, RankId{last}}));
      EXPECT_DOUBLE_EQ(reduces[1]->bytes, kEmbeddingGradientBytes);
      EXPECT_TRUE(reduces[1]->tied_embedding);
      EXPECT_FALSE(reduces[0]->tied_embedding);
    }
  }
  // The copy's weights are the difference between a stage and its 24 layers.
  const double layer_weights =
      (s.static_memory[0_rank].parameters / kFp16 - kVocab * kHidden / kTp);
  EXPECT_NEAR(layer_weights * kTp / 24, 12 * kHidden * kHidden, 0.01 * kHidden * kHidden);
}

TEST(TiedEmbedding, OneStageHoldsBothEndsAndReducesNothingExtra) {
  const auto study =
      test::megatron_gpt({"parallel.pp=1", "schedule.stage_layers=[48]", "cluster.nodes=2"});
  const Schedule& s = study->schedule;
  for (int r = 0; r < s.num_ranks(); ++r) EXPECT_EQ(all_reduces(s, r).size(), 1u) << r;
}

TEST(TiedEmbedding, InterleavedStagesReduceBetweenTheFirstAndLastRankOnly) {
  const auto study = test::megatron_gpt(
      {"parallel.pp=4", "cluster.nodes=8", "schedule.name=interleaved-1f1b",
       "schedule.interleaved-1f1b.chunks=2", "schedule.stage_layers=[6,6,6,6,6,6,6,6]"});
  const Schedule& s = study->schedule;
  ASSERT_EQ(s.num_ranks(), 8);
  for (int r = 0; r < 4; ++r) {
    const auto reduces = all_reduces(s, r);
    const bool end = r == 0 || r == 3;  // stage 0 on rank 0, stage 7 on rank 3
    ASSERT_EQ(reduces.size(), end ? 2u : 1u) << "rank " << r;
    if (end) {
      EXPECT_EQ(s.group_members(reduces[1]->group), (std::vector<RankId>{0_rank, 3_rank}));
    }
  }
}

TEST(TiedEmbedding, BamboosLastStageUsesItsSuccessorCopyOfTheEmbedding) {
  // Bamboo: every rank also holds its ring successor's model state, and the last stage's
  // successor is stage 0 with the embedding: no second copy there, but still the reduce.
  const auto study = test::megatron_gpt({"schedule.name=bamboo", "parallel.pp=4", "cluster.nodes=8",
                                         "schedule.stage_layers=[12,12,12,12]"});
  const Schedule& s = study->schedule;
  // Rank 0: stage 0 (embedding) + a copy of stage 1; rank 3: stage 3 + a copy of stage 0.
  EXPECT_DOUBLE_EQ(s.static_memory[0_rank].parameters, s.static_memory[3_rank].parameters);
  const auto reduces = all_reduces(s, 3);
  ASSERT_FALSE(reduces.empty());
  EXPECT_TRUE(reduces.back()->tied_embedding);
  EXPECT_EQ(s.group_members(reduces.back()->group), (std::vector<RankId>{0_rank, 3_rank}));
}

TEST(TiedEmbedding, AFrozenEmbeddingsCopyHoldsWeightsOnlyAndIsNotReduced) {
  const auto study = test::megatron_gpt({"model.modules.gpt.frozen=true"});
  const Schedule& s = study->schedule;
  EXPECT_DOUBLE_EQ(s.static_memory[0_rank].parameters, s.static_memory[1_rank].parameters);
  EXPECT_EQ(s.static_memory[1_rank].gradients, 0);
  for (int r = 0; r < s.num_ranks(); ++r) EXPECT_TRUE(all_reduces(s, r).empty()) << r;
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

TEST(UntiedEmbedding, TheHeadHasItsOwnWeightsAndNothingIsAllReducedBetweenTheEnds) {
  // Llama-style: the LM head's weights are its own (tie_embeddings = false). The last
  // stage holds them as parameters of its last layer, trained and reduced with the
  // stage's data-parallel all-reduce; no embedding all-reduce between the ends.
  const auto tied = test::megatron_gpt();
  const auto untied = test::megatron_gpt({"model.modules.gpt.tie_embeddings=false"});
  const Schedule& s = untied->schedule;
  for (int rank = 0; rank < 4; ++rank) {
    const auto reduces = all_reduces(s, rank);
    ASSERT_EQ(reduces.size(), 1u) << "rank " << rank;
    EXPECT_FALSE(reduces[0]->tied_embedding);
    // The same bytes as the tied copy's holder: the head's gradients replace the copy's.
    EXPECT_DOUBLE_EQ(reduces[0]->bytes, all_reduces(tied->schedule, rank)[0]->bytes);
    EXPECT_DOUBLE_EQ(s.static_memory[RankId{rank}].total(),
                     tied->schedule.static_memory[RankId{rank}].total());
  }
  // On one stage the head is vocab x hidden more state than a tied model.
  const auto one_untied =
      test::megatron_gpt({"parallel.pp=1", "schedule.stage_layers=[48]", "cluster.nodes=2",
                          "model.modules.gpt.tie_embeddings=false"});
  const auto one_tied =
      test::megatron_gpt({"parallel.pp=1", "schedule.stage_layers=[48]", "cluster.nodes=2"});
  EXPECT_DOUBLE_EQ(one_untied->schedule.static_memory[0_rank].parameters -
                       one_tied->schedule.static_memory[0_rank].parameters,
                   kVocab * kHidden / kTp * kFp16);
}

}  // namespace
}  // namespace loom
