// Pass 6 under parallel.overlap_grad_reduce (lowering/gradient_buckets.hpp): Megatron-LM's
// bucketed data-parallel all-reduce, each bucket async right after the compute that
// finishes its gradients, on the Narayanan et al. 39.1B GPT (pp 2, tp 8) at two replicas.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <variant>

#include "core/evaluator.hpp"
#include "core/validate.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

// One layer of the 39.1B GPT (hidden 8192) per GPU at tp 8 holds about 100M parameters:
// 250M per bucket makes buckets of three layers.
constexpr double kBucketSize = 250e6;

std::unique_ptr<Study> overlapped(std::vector<std::string> more = {}) {
  more.insert(more.begin(), {"parallel.overlap_grad_reduce=true",
                             "parallel.grad_bucket_size=" + std::to_string(kBucketSize)});
  return test::megatron_gpt(more);
}

std::vector<std::pair<size_t, const Collective*>> buckets(const Schedule& s, int rank) {
  std::vector<std::pair<size_t, const Collective*>> out;
  const auto& program = s.programs[RankId{rank}];
  for (size_t i = 0; i < program.size(); ++i) {
    const auto* c = std::get_if<Collective>(&program[i]);
    if (c && !c->tied_embedding) out.emplace_back(i, c);
  }
  return out;
}

bool finishes_gradients(const Op& op, int layer) {
  const auto* c = std::get_if<Compute>(&op);
  return c && (c->pass == Pass::kB || c->pass == Pass::kW) && !c->redundant &&
         layer >= c->first_layer && layer < c->end_layer;
}

TEST(GradientBuckets, EveryTrainedLayerInOneBucketOfAtMostTheBucketSize) {
  const auto plain = test::megatron_gpt();
  const auto study = overlapped();
  const Schedule& s = study->schedule;
  const double grad_bytes = study->problem.memory.gradient_bytes_per_param;
  for (int r = 0; r < s.num_ranks(); ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const auto mine = buckets(s, r);
    ASSERT_GT(mine.size(), 4u);
    std::map<int, int> covered;  // layer -> buckets covering it
    double bytes = 0, largest_layer = 0;
    for (const auto& [index, c] : mine) {
      EXPECT_TRUE(c->async);
      ASSERT_LT(c->first_layer, c->end_layer);
      for (int l = c->first_layer; l < c->end_layer; ++l) {
        ++covered[l];
        largest_layer = std::max(largest_layer, study->cost->parameters(l) / 8);
      }
      bytes += c->bytes;
    }
    for (const auto& [index, c] : mine) {
      // The first bucket may carry the tied embedding copy's gradients besides its layers.
      if (index != mine.front().first) {
        EXPECT_LE(c->bytes / grad_bytes, kBucketSize + largest_layer);
      }
    }
    for (const auto& [layer, n] : covered) EXPECT_EQ(n, 1) << "layer " << layer;
    EXPECT_EQ(covered.size(), 24u);  // every one of the rank's 24 layers
    // The same gradient bytes as the one blocking all-reduce without overlap.
    const auto whole = buckets(plain->schedule, r);
    ASSERT_EQ(whole.size(), 1u);
    EXPECT_FALSE(whole[0].second->async);
    EXPECT_NEAR(bytes / whole[0].second->bytes, 1.0, 1e-12);
  }
}

TEST(GradientBuckets, EachBucketFollowsTheComputeThatFinishesItsGradients) {
  const auto study = overlapped();
  const Schedule& s = study->schedule;
  ASSERT_NO_THROW(validate(s, study->config.model));
  for (int r = 0; r < s.num_ranks(); ++r) {
    const auto& program = s.programs[RankId{r}];
    for (const auto& [index, c] : buckets(s, r)) {
      SCOPED_TRACE("rank " + std::to_string(r) + " " + to_string(program[index], s));
      size_t before = index;
      while (before > 0 && std::holds_alternative<Collective>(program[before - 1])) --before;
      ASSERT_GT(before, 0u);
      bool finishes = false;
      for (int l = c->first_layer; l < c->end_layer; ++l) {
        finishes = finishes || finishes_gradients(program[before - 1], l);
        for (size_t k = index + 1; k < program.size(); ++k)
          EXPECT_FALSE(finishes_gradients(program[k], l)) << "layer " << l << " op " << k;
      }
      EXPECT_TRUE(finishes);
    }
  }
}

TEST(GradientBuckets, SplittingTheLastBackwardKeepsEachRanksComputeTime) {
  const auto plain = test::megatron_gpt();
  const auto study = overlapped();
  for (int r = 0; r < study->schedule.num_ranks(); ++r) {
    auto compute = [r](const Schedule& s, size_t* count) {
      double seconds = 0, weight = 0;
      for (const Op& op : s.programs[RankId{r}]) {
        if (const auto* c = std::get_if<Compute>(&op)) {
          seconds += c->seconds;
          weight += c->weight_grad_s;
          ++*count;
        }
      }
      return std::pair{seconds, weight};
    };
    size_t split = 0, whole = 0;
    const auto [t_split, w_split] = compute(study->schedule, &split);
    const auto [t_whole, w_whole] = compute(plain->schedule, &whole);
    EXPECT_NEAR(t_split / t_whole, 1.0, 1e-12) << r;
    EXPECT_NEAR(w_split / w_whole, 1.0, 1e-12) << r;
    EXPECT_GT(split, whole) << r;
  }
}

TEST(GradientBuckets, OverlapHidesTheReductionBehindTheBackward) {
  const auto plain = test::megatron_gpt();
  const auto study = overlapped();
  const Timeline t_plain = evaluate(plain->schedule, plain->config.cluster);
  const Timeline t = evaluate(study->schedule, study->config.cluster);
  // The blocking all-reduce's own ring time, on rank 0, is what overlap can hide at most.
  const auto [index, c] = buckets(plain->schedule, 0).front();
  const double ring = t_plain.timings[0_rank][index].end_s - t_plain.timings[0_rank][index].start_s;
  ASSERT_GT(ring, 0.05);
  EXPECT_LT(t.iteration_time_s(), t_plain.iteration_time_s() - 0.5 * ring);
  EXPECT_GE(t.iteration_time_s(), t_plain.iteration_time_s() - ring - 1e-9);
}

TEST(GradientBuckets, ALaterModelChunkIsOneBucketIssuedBeforeTheFirstChunkFinishes) {
  // Interleaved 1F1B, two chunks per rank: Megatron-Core buckets only a rank's first
  // chunk; the second (higher layers, finished first) is one bucket that overlaps the
  // first chunk's last backward.
  const auto study =
      overlapped({"schedule.name=interleaved-1f1b", "schedule.interleaved-1f1b.chunks=2",
                  "schedule.stage_layers=[12,12,12,12]"});
  const Schedule& s = study->schedule;
  const auto& stage_of = [&](int layer, int rank = 0) {
    for (const Op& op : s.programs[RankId{rank}]) {
      if (const auto* c = std::get_if<Compute>(&op);
          c && layer >= c->first_layer && layer < c->end_layer)
        return c->stage.value();
    }
    return -1;
  };
  for (int r = 0; r < s.num_ranks(); ++r) {
    std::map<int, int> per_stage;  // stage -> buckets
    for (const auto& [index, c] : buckets(s, r)) {
      const int stage = stage_of(c->first_layer, r);
      EXPECT_EQ(stage, stage_of(c->end_layer - 1, r)) << "a bucket spans two chunks";
      ++per_stage[stage];
    }
    ASSERT_EQ(per_stage.size(), 2u) << r;
    EXPECT_GT(per_stage.begin()->second, 1) << r;   // the first chunk: bucketed
    EXPECT_EQ(per_stage.rbegin()->second, 1) << r;  // the later chunk: one bucket
  }
  // Rank 0's later-chunk bucket goes before its first chunk's last backward.
  const auto& program = s.programs[0_rank];
  size_t later_bucket = 0, last_first_chunk_backward = 0;
  for (size_t i = 0; i < program.size(); ++i) {
    if (const auto* c = std::get_if<Collective>(&program[i]);
        c && !c->tied_embedding && stage_of(c->first_layer) != 0)
      later_bucket = i;
    if (const auto* c = std::get_if<Compute>(&program[i]);
        c && c->pass != Pass::kF && c->stage == StageId{0})
      last_first_chunk_backward = i;
  }
  EXPECT_LT(later_bucket, last_first_chunk_backward);
}

TEST(GradientBuckets, TheTiedEmbeddingAllReduceQueuesBehindTheBuckets) {
  // Megatron's finalize_model_grads reduces the embedding after the gradient sync.
  const auto study = overlapped();
  const Schedule& s = study->schedule;
  const Timeline t = evaluate(s, study->config.cluster);
  int tied = 0;
  for (int r = 0; r < s.num_ranks(); ++r) {
    double buckets_end = 0;
    const auto& program = s.programs[RankId{r}];
    for (size_t i = 0; i < program.size(); ++i) {
      const auto* c = std::get_if<Collective>(&program[i]);
      if (!c) continue;
      EXPECT_TRUE(c->async);
      if (!c->tied_embedding) {
        buckets_end = std::max(buckets_end, t.timings[RankId{r}][i].end_s);
      } else {
        ++tied;
        EXPECT_GE(t.timings[RankId{r}][i].start_s, buckets_end) << "rank " << r;
      }
    }
  }
  EXPECT_EQ(tied, s.num_ranks());  // first and last stage of both replicas
}

TEST(GradientBuckets, OneReplicaOrTheOptionOffKeepsOneBlockingAllReduce) {
  for (const auto& study : {overlapped({"parallel.dp=1", "cluster.nodes=2"}),
                            test::megatron_gpt({"parallel.overlap_grad_reduce=false"})}) {
    for (int r = 0; r < study->schedule.num_ranks(); ++r) {
      for (const auto& [index, c] : buckets(study->schedule, r)) EXPECT_FALSE(c->async);
    }
  }
}

}  // namespace
}  // namespace loom
