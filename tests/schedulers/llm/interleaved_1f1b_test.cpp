// Megatron interleaved 1F1B on a uniform model with free links: swept over (p, m, v),
// the schedule is valid (every sample once, no deadlock) and bubble time over ideal time
// is (p-1)/(v m) (Narayanan et al. SC'21 §2.2), i.e. iteration = ideal x (1 + (p-1)/(v m)).
// Megatron's microbatch groups (microbatch_group_size_per_vp_stage N, m not a multiple of
// p): its schedule table by hand, the same order as before for N = p, the rules for N and
// the last group as exit-2 messages, and random (p, v, m, N) valid with the same bubble.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <set>
#include <tuple>

#include "core/errors.hpp"
#include "core/evaluator.hpp"
#include "core/timeline.hpp"
#include "core/validate.hpp"
#include "schedulers/llm/order_text.hpp"
#include "schedulers/llm/zero_bubble.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

using test::input_error;

using test::order_text;

std::unique_ptr<Study> interleaved(const test::TempDir& dir, int p, int m, int v, int layers,
                                   const std::string& scheduler = "interleaved-1f1b",
                                   int group = 0) {
  const std::string config =
      "[[model.modules]]\nname = \"llm\"\nkind = \"llm\"\nlayers = " + std::to_string(layers) +
      "\nhidden = 1024\n[cost]\nmodel = \"table\"\n[cost.table.llm]\nforward = \"1ms\"\n"
      "backward = \"2ms\"\nactivation_bytes = \"1MiB\"\noutput_bytes = 0\n"
      "[cluster]\nnodes = 1\ngpus_per_node = 8\ngpu = \"A100-80GB\"\n"
      "intra_node = { bandwidth = \"300GBps\", latency = \"0s\" }\n"
      "inter_node = { bandwidth = \"25GBps\", latency = \"0s\" }\n[parallel]\npp = " +
      std::to_string(p) + "\n[schedule]\nname = \"" + scheduler +
      "\"\nmicrobatches = " + std::to_string(m) +
      "\n[schedule.interleaved-1f1b]\nchunks = " + std::to_string(v) +
      "\nmicrobatch_group_size = " + std::to_string(group) + "\n";
  return prepare_study(dir.write("interleaved.toml", config), {});
}

struct Case {
  int p, m, v;
};

class Interleaved : public ::testing::TestWithParam<Case> {};

TEST_P(Interleaved, BubbleOverIdealIsPMinusOneOverVM) {
  const auto [p, m, v] = GetParam();
  test::TempDir dir;
  const int layers = p * v;  // one layer per virtual stage
  const auto study = interleaved(dir, p, m, v, layers);
  const Schedule& s = study->schedule;
  validate(s, study->config.model);
  EXPECT_EQ(s.num_ranks(), p);
  // Chunk c of rank r is virtual stage c p + r.
  for (int r = 0; r < p; ++r) {
    std::set<int> stages;
    for (const Op& op : s.programs[RankId{r}])
      if (const auto* c = std::get_if<Compute>(&op)) stages.insert(c->stage.value());
    std::set<int> expected;
    for (int c = 0; c < v; ++c) expected.insert(c * p + r);
    EXPECT_EQ(stages, expected) << "rank " << r;
  }
  const Timeline t = evaluate(s, study->config.cluster);
  const double ideal = m * v * 3e-3;  // m microbatches x v chunks x (F + B) per rank
  EXPECT_NEAR(t.iteration_time_s(), ideal * (1 + (p - 1.0) / (v * m)), 1e-12);
  const Metrics metrics = compute_metrics(s, t);
  // DESIGN.md's bubble_fraction (over the whole iteration) is bubble / (ideal + bubble).
  EXPECT_NEAR(metrics.bubble_fraction, (p - 1.0) / (v * m + p - 1.0), 1e-9);
  // Rank 0 holds its warm-up plus one chunk-microbatch: p + (p-1)/v stage-equivalents.
  const int warmup = std::min(m * v, 2 * (p - 1) + (v - 1) * p);
  EXPECT_EQ(metrics.per_rank[0_rank].peak_live_microbatches, std::min(m * v, warmup + 1));
}

std::vector<Case> sweep() {
  std::vector<Case> cases;
  for (int p : {1, 2, 3, 4}) {
    for (int v : {1, 2, 3, 4}) {
      for (int groups : {1, 2, 4}) cases.push_back({p, p * groups, v});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Sweep, Interleaved, ::testing::ValuesIn(sweep()),
                         [](const auto& param_info) {
                           return "p" + std::to_string(param_info.param.p) + "_m" +
                                  std::to_string(param_info.param.m) + "_v" +
                                  std::to_string(param_info.param.v);
                         });

TEST(Interleaved, MoreChunksShrinkTheBubble) {
  test::TempDir dir;
  double previous = 1e300;
  for (int v : {1, 2, 4}) {
    const auto study = interleaved(dir, 4, 8, v, 16);
    const double t = evaluate(study->schedule, study->config.cluster).iteration_time_s();
    EXPECT_LT(t, previous) << "v " << v;
    previous = t;
  }
}

TEST(Interleaved, MicrobatchesNotAMultipleOfPIsAnInputErrorWithTheDefaultGroup) {
  // Default N = p = 4: 6 leaves a last group of 2 < p. Nearest valid: 4 (or 8), or N = 6.
  test::TempDir dir;
  const std::string what = input_error([&] { interleaved(dir, 4, 6, 2, 8); });
  EXPECT_NE(what.find(": schedule.microbatches: interleaved-1f1b"), std::string::npos) << what;
  EXPECT_NE(what.find("last group of 2 < parallel.pp = 4"), std::string::npos) << what;
  EXPECT_NE(what.find("use schedule.microbatches = 4 (or 8), or "
                      "schedule.interleaved-1f1b.microbatch_group_size = 6"),
            std::string::npos)
      << what;
}

TEST(Interleaved, GroupRulesAreInputErrorsNamingTheNearestValidValue) {
  // Megatron: p <= N <= m, m mod N = 0 or >= p (and so m >= p).
  EXPECT_EQ(interleaved_group_error(4, 6, 6), "");
  EXPECT_EQ(interleaved_group_error(2, 5, 3), "");  // last group of 2 = p
  EXPECT_EQ(interleaved_group_error(4, 8, 4), "");
  std::string e = interleaved_group_error(4, 3, 4);
  EXPECT_EQ(e.rfind("schedule.microbatches: interleaved-1f1b needs at least parallel.pp = 4", 0),
            0u)
      << e;
  EXPECT_NE(e.find("use schedule.microbatches = 4"), std::string::npos) << e;
  e = interleaved_group_error(4, 8, 2);
  EXPECT_EQ(
      e.rfind("schedule.interleaved-1f1b.microbatch_group_size: must be from parallel.pp = 4", 0),
      0u)
      << e;
  EXPECT_NE(e.find("got 2; use 4"), std::string::npos) << e;
  e = interleaved_group_error(4, 8, 9);
  EXPECT_NE(e.find("got 9; use 8"), std::string::npos) << e;
  // 11 in groups of 4: last group 3 < 4; 12 is nearer than 8; N = 5 (last 1) fails, N = 6
  // (last 5) is the nearest valid group size.
  e = interleaved_group_error(4, 11, 4);
  EXPECT_NE(e.find("use schedule.microbatches = 12 (or 8), or "
                   "schedule.interleaved-1f1b.microbatch_group_size = 6"),
            std::string::npos)
      << e;
  // Through the config: a group size out of range is exit 2 naming its key.
  test::TempDir dir;
  e = input_error([&] { interleaved(dir, 2, 4, 2, 4, "interleaved-1f1b", 5); });
  EXPECT_NE(e.find(": schedule.interleaved-1f1b.microbatch_group_size: must be from"),
            std::string::npos)
      << e;
}

TEST(Interleaved, MegatronScheduleTableForGroupsOfThreeByHand) {
  // Megatron's docstring (get_schedule_table): PP2 N3 M5 VP2.
  //   virtual_microbatch_id | 0 1 2 3 4 5 6 7 8 9
  //   microbatch_id         | 0 1 2 0 1 2 3 4 3 4
  //   model_chunk_id        | 0 0 0 1 1 1 0 0 1 1
  std::string microbatches, chunks;
  for (const VirtualMicrobatch& t : megatron_schedule_table(5, 2, 3)) {
    microbatches += std::to_string(t.microbatch);
    chunks += std::to_string(t.chunk);
  }
  EXPECT_EQ(microbatches, "0120123434");
  EXPECT_EQ(chunks, "0001110011");
}

TEST(Interleaved, OrdersForGroupsOfThreeOnTwoRanksByHand) {
  // p = 2, v = 2, m = 5, N = 3 (rank 0 holds stages 0 and 2, rank 1 holds 1 and 3). Rank
  // 0 warms up with 2(p-1) + (v-1)N = 5 forwards (table entries 0-4), rank 1 with 3; then
  // forward k = warm-up + j and backward k = j (chunk mirrored) per step.
  const RankOrders orders = interleaved_1f1b_orders(2, 5, 2, 3);
  EXPECT_EQ(order_text(orders[PipelineRank{0}]),
            "0F0 0F1 0F2 2F0 2F1 2F2 2B0 0F3 2B1 0F4 2B2 2F3 0B0 2F4 0B1 0B2 2B3 2B4 0B3 0B4");
  EXPECT_EQ(order_text(orders[PipelineRank{1}]),
            "1F0 1F1 1F2 3F0 3B0 3F1 3B1 3F2 3B2 1F3 1B0 1F4 1B1 3F3 1B2 3F4 3B3 3B4 1B3 1B4");
}

TEST(Interleaved, FigureFourOrderAndGroupOfPIsTheOriginalFormula) {
  // Narayanan et al. SC'21 Figure 4 (p = 4, v = 2, m = 8), device 1: forwards of
  // microbatches 1-4 on chunk 0, 1-4 on chunk 1, 5-6 on chunk 0 (warm-up 2(p-1) + (v-1)p =
  // 10), then one forward one backward from chunk 1's microbatch 1 (0-based here).
  const RankOrders orders = interleaved_1f1b_orders(4, 8, 2);
  EXPECT_EQ(order_text(orders[PipelineRank{0}]),
            "0F0 0F1 0F2 0F3 4F0 4F1 4F2 4F3 0F4 0F5 0F6 4B0 0F7 4B1 4F4 4B2 4F5 4B3 4F6 0B0 "
            "4F7 0B1 0B2 0B3 4B4 4B5 4B6 4B7 0B4 0B5 0B6 0B7");
  // ... the original closed form: microbatch (k div pv) p + k mod p, chunk (k mod pv) div p.
  for (int p : {1, 2, 3, 4}) {
    for (int v : {1, 2, 3}) {
      for (int m : {p, 2 * p, 3 * p}) {
        const std::vector<VirtualMicrobatch> table = megatron_schedule_table(m, v, p);
        for (int k = 0; k < m * v; ++k) {
          EXPECT_EQ(table[static_cast<size_t>(k)].microbatch, (k / (p * v)) * p + k % p);
          EXPECT_EQ(table[static_cast<size_t>(k)].chunk, (k % (p * v)) / p);
        }
        EXPECT_EQ(order_text(interleaved_1f1b_orders(p, m, v, 0)[PipelineRank{0}]),
                  order_text(interleaved_1f1b_orders(p, m, v, p)[PipelineRank{0}]));
      }
    }
  }
}

TEST(Interleaved, RandomGroupsValidEveryMicrobatchOncePerChunkAndTheSameBubble) {
  // Random p, v, m (not only multiples of p) and every valid N: the lowered schedule
  // validates (each (stage, microbatch) F and B exactly once, every dependency produced
  // before use, no cycle of waits) and, with equal chunks and free links, keeps the
  // bubble (p-1)(F+B) per chunk: iteration = (m v + p - 1) x 3 ms. Rank 0's peak is its
  // warm-up + 1 chunk-microbatches.
  std::mt19937 rng(15);
  test::TempDir dir;
  int ran = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const int p = std::uniform_int_distribution<int>(1, 4)(rng);
    const int v = std::uniform_int_distribution<int>(1, 3)(rng);
    const int m = std::uniform_int_distribution<int>(p, 3 * p + 2)(rng);
    const int group = std::uniform_int_distribution<int>(p, m)(rng);
    const std::string what = "p " + std::to_string(p) + " v " + std::to_string(v) + " m " +
                             std::to_string(m) + " N " + std::to_string(group);
    if (!interleaved_group_error(p, m, group).empty()) {
      EXPECT_THROW(interleaved(dir, p, m, v, p * v, "interleaved-1f1b", group), InputError) << what;
      continue;
    }
    ++ran;
    const RankOrders orders = interleaved_1f1b_orders(p, m, v, group);
    for (int r = 0; r < p; ++r) {
      std::set<std::tuple<int, int, MicrobatchId>> seen;
      for (const RankAction& a : orders[PipelineRank{r}]) {
        EXPECT_EQ(a.stage.value() % p, r) << what;
        EXPECT_TRUE(seen.insert({a.stage.value(), static_cast<int>(a.pass), a.microbatch}).second)
            << what;
      }
      EXPECT_EQ(seen.size(), static_cast<size_t>(2 * m * v)) << what;
    }
    const auto study = interleaved(dir, p, m, v, p * v, "interleaved-1f1b", group);
    const Schedule& s = study->schedule;
    ASSERT_NO_THROW(validate(s, study->config.model)) << what;
    const Timeline t = evaluate(s, study->config.cluster);
    EXPECT_NEAR(t.iteration_time_s(), (m * v + p - 1) * 3e-3, 1e-12) << what;
    const int warmup = std::min(m * v, 2 * (p - 1) + (v - 1) * group);
    EXPECT_EQ(compute_metrics(s, t).per_rank[0_rank].peak_live_microbatches,
              std::min(m * v, warmup + 1))
        << what;
  }
  EXPECT_GE(ran, 20);
}

TEST(Interleaved, MoreVirtualStagesThanLayersIsAnInputError) {
  test::TempDir dir;
  EXPECT_THROW(interleaved(dir, 4, 4, 4, 8), InputError);
}

TEST(Interleaved, RankOrdersCoverEveryChunkAndMicrobatchOnce) {
  const int p = 3, m = 6, v = 2;
  const RankOrders orders = interleaved_1f1b_orders(p, m, v);
  for (int r = 0; r < p; ++r) {
    std::set<std::tuple<int, int, MicrobatchId>> seen;
    for (const RankAction& a : orders[PipelineRank{r}]) {
      EXPECT_EQ(a.stage.value() % p, r);
      EXPECT_TRUE(seen.insert({a.stage.value(), static_cast<int>(a.pass), a.microbatch}).second);
    }
    EXPECT_EQ(seen.size(), static_cast<size_t>(2 * m * v));
  }
}

}  // namespace
}  // namespace loom
