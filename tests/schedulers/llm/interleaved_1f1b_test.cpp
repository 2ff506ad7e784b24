// Megatron interleaved 1F1B on a uniform model with free links: swept over (p, m, v),
// the schedule is valid (every sample once, no deadlock) and bubble time over ideal time
// is (p-1)/(v m) (Narayanan et al. SC'21 §2.2), i.e. iteration = ideal x (1 + (p-1)/(v m)).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "core/errors.hpp"
#include "core/evaluator.hpp"
#include "core/timeline.hpp"
#include "core/validate.hpp"
#include "schedulers/llm/zero_bubble.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

std::unique_ptr<Study> interleaved(const test::TempDir& dir, int p, int m, int v, int layers,
                                   const std::string& scheduler = "interleaved-1f1b") {
  const std::string config =
      "[[model.modules]]\nname = \"llm\"\nkind = \"llm\"\nlayers = " + std::to_string(layers) +
      "\nhidden = 1024\n[cost]\nmodel = \"table\"\n[cost.table.llm]\nforward = \"1ms\"\n"
      "backward = \"2ms\"\nactivation_bytes = \"1MiB\"\noutput_bytes = 0\n"
      "[cluster]\nnodes = 1\ngpus_per_node = 8\ngpu = \"A100-80GB\"\n"
      "intra_node = { bandwidth = \"300GBps\", latency = \"0s\" }\n"
      "inter_node = { bandwidth = \"25GBps\", latency = \"0s\" }\n[parallel]\npp = " +
      std::to_string(p) + "\n[schedule]\nname = \"" + scheduler +
      "\"\nmicrobatches = " + std::to_string(m) + "\nchunks = " + std::to_string(v) + "\n";
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
    for (const Op& op : s.programs[static_cast<size_t>(r)])
      if (const auto* c = std::get_if<Compute>(&op)) stages.insert(c->stage);
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
  EXPECT_EQ(metrics.per_rank[0].peak_live_microbatches, std::min(m * v, warmup + 1));
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

TEST(Interleaved, MicrobatchesNotAMultipleOfPIsAnInputError) {
  test::TempDir dir;
  try {
    interleaved(dir, 4, 6, 2, 8);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("schedule.microbatches"), std::string::npos);
  }
}

TEST(Interleaved, MoreVirtualStagesThanLayersIsAnInputError) {
  test::TempDir dir;
  EXPECT_THROW(interleaved(dir, 4, 4, 4, 8), InputError);
}

TEST(Interleaved, RankOrdersCoverEveryChunkAndMicrobatchOnce) {
  const int p = 3, m = 6, v = 2;
  const RankOrders orders = interleaved_1f1b_orders(p, m, v);
  for (int r = 0; r < p; ++r) {
    std::set<std::tuple<int, int, int>> seen;
    for (const RankAction& a : orders[static_cast<size_t>(r)]) {
      EXPECT_EQ(a.stage % p, r);
      EXPECT_TRUE(seen.insert({a.stage, static_cast<int>(a.pass), a.microbatch}).second);
    }
    EXPECT_EQ(seen.size(), static_cast<size_t>(2 * m * v));
  }
}

}  // namespace
}  // namespace loom
