// Bamboo (Thorpe et al. NSDI'23): 1F1B where every stage also runs its successor's
// forward on its own output and holds its model state. With F = B = T per stage the
// iteration is (3m + 2(p-1)) T over a (p, m) sweep: each forward takes 2T but the stage's
// own output leaves after T, so fill and drain stay 1F1B's (p-1) T each. Static memory is
// the stage's own state plus its ring successor's; a failover runs a lost stage on its
// predecessor's rank ([schedule.bamboo] failed_over); adjacent failures and pp < 2 are rejected.
#include <gtest/gtest.h>

#include <map>
#include <tuple>

#include "core/errors.hpp"
#include "core/evaluator.hpp"
#include "core/index.hpp"
#include "core/timeline.hpp"
#include "core/validate.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

/// The uniform example with F = B = T = 1 ms per stage (2 layers of 0.5 ms each).
std::unique_ptr<Study> uniform(const std::string& scheduler, int pp, int m,
                               std::vector<std::string> extra = {}) {
  const int stages = pp + isize(extra);  // one stage per failed entry
  std::vector<std::string> o = {"schedule.name=" + scheduler,
                                "parallel.pp=" + std::to_string(pp),
                                "parallel.dp=1",
                                "schedule.microbatches=" + std::to_string(m),
                                "model.modules.llm.layers=" + std::to_string(2 * stages),
                                "cost.table.llm.backward=0.5ms",
                                "sim.backend=evaluator"};
  if (!extra.empty()) {
    std::string list;
    for (const std::string& k : extra) list += (list.empty() ? "" : ",") + k;
    o.push_back("schedule.bamboo.failed_over=[" + list + "]");
  }
  return test::example("uniform-1f1b.toml", o);
}

TEST(Bamboo, EveryStageRunsItsSuccessorsForwardAndTheIterationHasAClosedForm) {
  for (int p : {2, 3, 4, 6}) {
    for (int m : {1, 2, 4, 8, 13}) {
      const auto study = uniform("bamboo", p, m);
      const Schedule& s = study->schedule;
      ASSERT_NO_THROW(validate(s, study->config.model)) << "p " << p << " m " << m;
      std::map<std::tuple<int, MicrobatchId, Pass>, int> real;  // (stage, microbatch, pass) -> runs
      for (int r = 0; r < p; ++r) {
        int copies = 0;
        for (const Op& op : s.programs[RankId{r}]) {
          const auto* c = std::get_if<Compute>(&op);
          if (!c) continue;
          if (!c->redundant) {
            ++real[{c->stage.value(), c->microbatch, c->pass}];
            continue;
          }
          ++copies;  // forward only, over the successor's layers
          EXPECT_EQ(c->pass, Pass::kF);
          EXPECT_EQ(c->first_layer, 2 * ((r + 1) % p)) << "rank " << r;
          EXPECT_EQ(c->end_layer, 2 * ((r + 1) % p) + 2) << "rank " << r;
        }
        EXPECT_EQ(copies, m) << "rank " << r;
      }
      EXPECT_EQ(real.size(), static_cast<size_t>(2 * p * m));
      for (const auto& [key, n] : real) EXPECT_EQ(n, 1);
      const Metrics metrics = compute_metrics(s, evaluate(s, study->config.cluster));
      EXPECT_NEAR(metrics.iteration_time_s, (3 * m + 2 * (p - 1)) * 1e-3, 1e-12)
          << "p " << p << " m " << m;
    }
  }
}

TEST(Bamboo, EachRankHoldsItsStageAndItsSuccessorsModelState) {
  const int p = 4;
  const auto bamboo = uniform("bamboo", p, 8);
  const auto plain = uniform("1f1b", p, 8);
  for (int r = 0; r < p; ++r) {
    const StaticMemory& got = bamboo->schedule.static_memory[RankId{r}];
    const StaticMemory& own = plain->schedule.static_memory[RankId{r}];
    const StaticMemory& next = plain->schedule.static_memory[RankId{(r + 1) % p}];
    EXPECT_DOUBLE_EQ(got.parameters, own.parameters + next.parameters) << "rank " << r;
    EXPECT_DOUBLE_EQ(got.gradients, own.gradients + next.gradients) << "rank " << r;
    EXPECT_DOUBLE_EQ(got.optimizer, own.optimizer + next.optimizer) << "rank " << r;
  }
  // The copy's activations live until the stage's own backward: twice 1F1B's peak bytes
  // on the same number of live microbatches.
  const auto b = activation_peaks(bamboo->schedule);
  const auto f = activation_peaks(plain->schedule);
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(b[RankId{r}].microbatches, f[RankId{r}].microbatches);
    EXPECT_DOUBLE_EQ(b[RankId{r}].bytes, 2 * f[RankId{r}].bytes);
  }
}

TEST(Bamboo, AFailedOverStageRunsOnItsPredecessorsRank) {
  // 4 stages on 3 ranks, stage 2 lost: rank 1 runs stages 1 and 2 (forwards in order,
  // backwards in reverse); stage 1's successor shares its rank and stage 2's holder is
  // gone, so neither has a copy; stage 0 copies stage 1, stage 3 copies stage 0.
  const int m = 6;
  const auto study = uniform("bamboo", 3, m, {"2"});
  const Schedule& s = study->schedule;
  ASSERT_NO_THROW(validate(s, study->config.model));
  std::map<int, std::vector<int>> stages_of_rank;
  std::map<int, int> copies_of_rank;
  for (int r = 0; r < 3; ++r) {
    for (const Op& op : s.programs[RankId{r}]) {
      const auto* c = std::get_if<Compute>(&op);
      if (!c) continue;
      if (c->redundant) {
        ++copies_of_rank[r];
      } else if (c->pass == Pass::kF && c->microbatch == MicrobatchId{0}) {
        stages_of_rank[r].push_back(c->stage.value());
      }
    }
  }
  EXPECT_EQ(stages_of_rank[0], std::vector<int>{0});
  EXPECT_EQ(stages_of_rank[1], (std::vector<int>{1, 2}));
  EXPECT_EQ(stages_of_rank[2], std::vector<int>{3});
  EXPECT_EQ(copies_of_rank[0], m);
  EXPECT_EQ(copies_of_rank[1], 0);
  EXPECT_EQ(copies_of_rank[2], m);
  // Rank 1 does 4T per microbatch (two stages, no copy) against 3T elsewhere: slower.
  const auto healthy = uniform("bamboo", 4, m);
  const double failed_s = compute_metrics(s, evaluate(s, study->config.cluster)).iteration_time_s;
  const double healthy_s =
      compute_metrics(healthy->schedule, evaluate(healthy->schedule, healthy->config.cluster))
          .iteration_time_s;
  EXPECT_NEAR(failed_s, 28e-3, 1e-12);  // 4T x 6 + fill and drain
  EXPECT_GT(failed_s, healthy_s);
}

TEST(Bamboo, RejectsAdjacentFailuresAndOneStage) {
  EXPECT_THROW(uniform("bamboo", 2, 4, {"1", "2"}), InputError);  // stage 2's copy was on 1
  EXPECT_THROW(uniform("bamboo", 2, 4, {"0", "3"}), InputError);  // ring: 3 -> 0
  EXPECT_THROW(uniform("bamboo", 1, 4), InputError);
  EXPECT_THROW(uniform("bamboo", 3, 4, {"4"}), InputError);  // 4 stages: 0..3
  // [schedule.bamboo] is bamboo's own table: another scheduler runs as if it were absent.
  EXPECT_NO_THROW(uniform("1f1b", 3, 4, {"1"}));
  try {
    uniform("bamboo", 2, 4, {"1", "2"});
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("adjacent"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace loom
