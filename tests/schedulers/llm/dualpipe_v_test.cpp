// DualPipeV (DeepSeek-V3 arXiv 2412.19437 §3.2.1; deepseek-ai/DualPipe dualpipev.py; PyTorch
// ScheduleDualPipeV): the orders written out by hand from the reference's eight steps, the
// overlapped F+B pairs through the lowering (grouped messages, "(F+B)" in the IR text and
// its round trip, OVERLAP_F_B in PyTorch's CSV), validity and the evaluator over a (p, m)
// sweep, the iteration time for T_F = T_I = T_W, peak activations, and the m >= 2p rule.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "app/pytorch_csv.hpp"
#include "core/errors.hpp"
#include "core/evaluator.hpp"
#include "core/schedule_text.hpp"
#include "core/timeline.hpp"
#include "core/validate.hpp"
#include "schedulers/llm/order_text.hpp"
#include "schedulers/llm/zero_bubble.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

using test::order_text;

/// The iteration in units of T for T_F = T_I = T_W = T per chunk on free links: every rank
/// computes 2m (F + I + W) = 6m T and the pipeline adds 2(p-1) T, DeepSeek-V3's Table 2
/// bubble (PP/2 - 1)(F&B + B - 3W) for DualPipe on PP = 2p stages, with Loom's fused pair
/// costing F&B = F + B = 3T (no compute overlap gained): (p-1)(3 + 2 - 3) T.
double dualpipe_v_unit_makespan(int p, int m) {
  return 6 * m + 2 * (p - 1);
}
/// Peak live chunk-microbatches on every rank: ZB-V's 2p, plus the forward half of an
/// overlapped pair that starts before its backward half frees one (DeepSeek-V3 Table 2:
/// DualPipe holds PP + 1 stage-activations, here 2p + 1 half-stage chunks).
int dualpipe_v_peak(int p, int /*rank*/) {
  return 2 * p + 1;
}

std::unique_ptr<Study> uniform(const std::string& scheduler, int pp, int m, int layers = 8,
                               std::vector<std::string> extra = {}) {
  return test::uniform_llm(scheduler, pp, m, layers, std::move(extra));
}

TEST(DualPipeV, OrdersForTwoRanksAndFourMicrobatchesByHand) {
  // p = 2, m = 4; rank 0 holds stages 0 (chunk 0) and 3 (chunk 1), rank 1 stages 1 and 2.
  // Rank 0: step 1 2(p-r-1) = 2 F0; step 2 one (F0, F1); step 3 one (I1, W, F1); step 4
  // m-2p+r+1 = 1 x ((F0;B1), (F1;B0)); step 5 one (B1, (F1;B0)); step 6 one (B1, then I0
  // with its W deferred: rank 0 is even, so chunk 0 switches first); step 7 one (W, I0);
  // step 8 the last W.
  // Rank 1 (the turn of the V): step 2 two (F0, F1); step 4 two rounds, the first (F0;B1)
  // not overlapped; step 6 two (B1, B0), the second as I (odd rank: B1 switches at i = 1);
  // step 8 the two deferred W, oldest first.
  const RankOrders orders = dualpipe_v_orders(2, 4);
  ASSERT_EQ(orders.size(), 2u);
  EXPECT_EQ(order_text(orders[PipelineRank{0}]),
            "0F0 0F1 0F2 3F0 3I0 3W0 3F1 (0F3;3B1) (3F2;0B0) 3B2 (3F3;0B1) 3B3 0I2 0W2 0I3 0W3");
  EXPECT_EQ(order_text(orders[PipelineRank{1}]),
            "1F0 2F0 1F1 2F1 1F2 2B0 (2F2;1B0) (1F3;2B1) (2F3;1B1) 2B2 1B2 2I3 1I3 2W3 1W3");
}

TEST(DualPipeV, OrdersForThreeRanksAndSixMicrobatches) {
  // p = 3, m = 6 = 2p (the smallest valid m): rank r holds r and 5-r. Rank 2 (even, the
  // middle of the V) switches B0 to I first, at i = (r+1)/2 = 1 of step 6.
  const RankOrders orders = dualpipe_v_orders(3, 6);
  EXPECT_EQ(order_text(orders[PipelineRank{0}]),
            "0F0 0F1 0F2 0F3 0F4 5F0 5I0 5W0 5F1 5I1 5W1 5F2 (0F5;5B2) (5F3;0B0) 5B3 "
            "(5F4;0B1) 5B4 (5F5;0B2) 5B5 0I3 0W3 0I4 0W4 0I5 0W5");
  EXPECT_EQ(order_text(orders[PipelineRank{1}]),
            "1F0 1F1 1F2 4F0 1F3 4F1 4I0 4W0 4F2 (1F4;4B1) (4F3;1B0) (1F5;4B2) (4F4;1B1) 4B3 "
            "(4F5;1B2) 4B4 1B3 4I5 1I4 4W5 1I5 1W4 1W5");
  EXPECT_EQ(order_text(orders[PipelineRank{2}]),
            "2F0 3F0 2F1 3F1 2F2 3F2 2F3 3B0 (3F3;2B0) (2F4;3B1) (3F4;2B1) (2F5;3B2) (3F5;2B2) "
            "3B3 2B3 3B4 2I4 3I5 2I5 2W4 3W5 2W5");
}

TEST(DualPipeV, OverlappedPairsAreFusedInTheIrAndRoundTrip) {
  const auto study = uniform("dualpipe-v", 2, 4);
  const Schedule& s = study->schedule;
  // Rank 0's (0F3;3B1): F of stage 0 for microbatch 3 then B of stage 3 for microbatch 1,
  // both flagged, adjacent, with the pair's receives before and sends after.
  const auto& program = s.programs[0_rank];
  size_t f = 0;
  while (f < program.size()) {
    const auto* c = std::get_if<Compute>(&program[f]);
    if (c && c->overlapped) break;
    ++f;
  }
  ASSERT_LT(f + 1, program.size());
  EXPECT_EQ(to_string(program[f], s), "0F3(F+B)");
  EXPECT_EQ(to_string(program[f + 1], s), "3B1(F+B)");
  // The F half's output (stage 0 -> stage 1 on rank 1) leaves after the B half: the fused
  // action sends when it ends.
  ASSERT_LT(f + 2, program.size());
  const auto* send = std::get_if<Send>(&program[f + 2]);
  ASSERT_NE(send, nullptr) << to_string(program[f + 2], s);
  EXPECT_EQ(send->tag.pass, Pass::kF);
  EXPECT_EQ(send->tag.microbatch, MicrobatchId{3});
  // Every overlapped B directly follows its overlapped F (no message between them): rank 0
  // runs (0F3;3B1) (3F2;0B0) (3F3;0B1), rank 1 (2F2;1B0) (1F3;2B1) (2F3;1B1).
  for (int r = 0; r < 2; ++r) {
    const auto& prog = s.programs[RankId{r}];
    int pairs = 0;
    for (size_t k = 1; k < prog.size(); ++k) {
      const auto* c = std::get_if<Compute>(&prog[k]);
      if (!c || !c->overlapped || c->pass != Pass::kB) continue;
      const auto* before = std::get_if<Compute>(&prog[k - 1]);
      ASSERT_NE(before, nullptr) << "rank " << r << " op " << k;
      EXPECT_TRUE(before->overlapped && before->pass == Pass::kF);
      ++pairs;
    }
    EXPECT_EQ(pairs, 3) << "rank " << r;
  }
  // The text form round-trips, "(F+B)" included.
  EXPECT_TRUE(parse_schedule(format_schedule(s), "s.loom") == s);
  // PyTorch's action CSV writes the pair as one OVERLAP_F_B action and reads it back as one.
  const std::string csv = format_pytorch_csv(s, false);
  EXPECT_NE(csv.find("(0F3;3B1)OVERLAP_F_B"), std::string::npos) << csv;
  const RankOrders parsed = parse_pytorch_csv(csv, "s.csv");
  EXPECT_EQ(order_text(parsed[PipelineRank{0}]),
            order_text(dualpipe_v_orders(2, 4)[PipelineRank{0}]));
  // A pair of the same microbatch is no fused action: it runs unfused, one after the other.
  const RankOrders same = parse_pytorch_csv("(1F0;1B0)OVERLAP_F_B\n", "s.csv");
  EXPECT_EQ(same[PipelineRank{0}][0].with_next, Join::kNone);
}

TEST(DualPipeV, MisformedPairsAreInputErrors) {
  // An overlapped F must be followed by a B of another microbatch.
  const auto study = uniform("1f1b", 2, 2);
  PipelinePrograms programs{
      .stages = chain_stages(*study->problem.model, plan_stages(study->problem, 2)),
      .ranks = 2,
      .stage_rank = {},
      .replicas = {{{{StageId{0}, Pass::kF, MicrobatchId{0}, ActionKind::kCompute, Join::kOverlap},
                     {StageId{0}, Pass::kF, MicrobatchId{1}},
                     {StageId{0}, Pass::kB, MicrobatchId{0}},
                     {StageId{0}, Pass::kB, MicrobatchId{1}}},
                    {{StageId{1}, Pass::kF, MicrobatchId{0}},
                     {StageId{1}, Pass::kB, MicrobatchId{0}},
                     {StageId{1}, Pass::kF, MicrobatchId{1}},
                     {StageId{1}, Pass::kB, MicrobatchId{1}}}}}};
  try {
    lower(study->problem, "t", programs);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 step 0 (0F0): an overlapped action"),
              std::string::npos)
        << e.what();
  }
}

struct Case {
  int p, m;
};

class DualPipeVSweep : public ::testing::TestWithParam<Case> {};

TEST_P(DualPipeVSweep, ValidRunsEachChunkOnceAndKeepsItsPeak) {
  const auto [p, m] = GetParam();
  const int layers = 2 * p * 2;  // two layers per chunk
  const auto study = uniform("dualpipe-v", p, m, layers);
  const Schedule& s = study->schedule;
  ASSERT_NO_THROW(validate(s, study->config.model));
  ASSERT_EQ(s.num_ranks(), p);
  for (int r = 0; r < p; ++r) {
    std::set<int> stages;
    std::map<std::pair<int, Pass>, int> count;  // (stage, pass) -> microbatches
    int pairs = 0;
    for (const Op& op : s.programs[RankId{r}]) {
      if (const auto* c = std::get_if<Compute>(&op)) {
        stages.insert(c->stage.value());
        ++count[{c->stage.value(), c->pass == Pass::kB ? Pass::kI : c->pass}];
        if (c->pass == Pass::kB) ++count[{c->stage.value(), Pass::kW}];
        if (c->overlapped && c->pass == Pass::kF) ++pairs;
      }
    }
    EXPECT_EQ(stages, (std::set<int>{r, 2 * p - 1 - r})) << "rank " << r;
    for (const auto& [key, n] : count) EXPECT_EQ(n, m) << "rank " << r << " stage " << key.first;
    // Steps 4 and 5: 2(m-2p+r+1) + (p-r-1) pairs, one fewer on the last rank.
    EXPECT_EQ(pairs, 2 * (m - 2 * p + r + 1) + (p - r - 1) - (r == p - 1 ? 1 : 0)) << "rank " << r;
  }
  const Timeline t = evaluate(s, study->config.cluster);
  const Metrics metrics = compute_metrics(s, t);
  // T_F = T_I = T_W = T per chunk (0.5 ms per layer, two layers): see the closed form below.
  const double T = 1e-3;
  EXPECT_NEAR(metrics.iteration_time_s, dualpipe_v_unit_makespan(p, m) * T, 1e-12)
      << "p " << p << " m " << m;
  const double chunk_bytes = 2 * 64.0 * 1024 * 1024;
  const auto peaks = activation_peaks(s);
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(peaks[RankId{r}].microbatches, dualpipe_v_peak(p, r)) << "rank " << r;
    EXPECT_DOUBLE_EQ(peaks[RankId{r}].bytes, dualpipe_v_peak(p, r) * chunk_bytes);
  }
}

std::vector<Case> sweep() {
  std::vector<Case> cases;
  for (int p : {1, 2, 3, 4}) {
    for (int m : std::set<int>{2 * p, 2 * p + 1, 3 * p, 12}) cases.push_back({p, m});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Sweep, DualPipeVSweep, ::testing::ValuesIn(sweep()),
                         [](const auto& param_info) {
                           return "p" + std::to_string(param_info.param.p) + "_m" +
                                  std::to_string(param_info.param.m);
                         });

TEST(DualPipeV, RandomPAndMValidateAndMeetTheClosedForm) {
  // Seeded: p 1-6, m 2p-4p. validate() checks every dependency and each (stage, pass,
  // microbatch) once; the evaluator finishing is no deadlock.
  std::mt19937 rng(15);
  for (int trial = 0; trial < 12; ++trial) {
    const int p = std::uniform_int_distribution<int>(1, 6)(rng);
    const int m = std::uniform_int_distribution<int>(2 * p, 4 * p)(rng);
    const auto study = uniform("dualpipe-v", p, m, 4 * p);
    ASSERT_NO_THROW(validate(study->schedule, study->config.model)) << "p " << p << " m " << m;
    const Metrics metrics =
        compute_metrics(study->schedule, evaluate(study->schedule, study->config.cluster));
    EXPECT_NEAR(metrics.iteration_time_s, dualpipe_v_unit_makespan(p, m) * 1e-3, 1e-12)
        << "p " << p << " m " << m;
  }
}

TEST(DualPipeV, FewerThanTwoPMicrobatchesIsAnInputErrorNamingTheRule) {
  EXPECT_EQ(dualpipe_v_microbatch_error(4, 8), "");
  try {
    uniform("dualpipe-v", 4, 7);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("schedule.microbatches: dualpipe-v needs at least 2 x parallel.pp = 8"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("set schedule.microbatches >= 8"), std::string::npos) << what;
  }
  try {
    uniform("dualpipe-v", 4, 8, 6);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.pp <= 3"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace loom
