// Exact unit-time checks of the LLM-level reference schedules (zb-h1, zb-h2,
// interleaved-1f1b) on a uniform model with free links: every layer costs T_F, T_I and
// T_W per microbatch (table cost model), so stage times are exact multiples.
//   zero-bubble paper Table 2: ZB-H1 bubble (p-1)(T_F+T_B-T_W), peak p microbatches;
//     ZB-H2 bubble (p-1)(T_F+T_B-2T_W), peak 2p-1; T_B is the paper's B pass, our I.
//   Megatron interleaved: bubble time / ideal time = (p-1)/(v m).
#include "schedulers/llm/zero_bubble.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include "core/errors.hpp"
#include "core/evaluator.hpp"
#include "core/timeline.hpp"
#include "core/validate.hpp"
#include "schedulers/llm/span_bubble.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

/// Per-layer unit costs in milliseconds.
struct Units {
  double f = 1, i = 1, w = 1;
};

/// A one-module LLM of `layers` identical layers on 8 GPUs with free links.
std::unique_ptr<Study> uniform(const test::TempDir& dir, const std::string& scheduler, int p, int m,
                               int v, int layers, Units u) {
  const std::string config =
      "[[model.modules]]\nname = \"llm\"\nkind = \"llm\"\nlayers = " + std::to_string(layers) +
      "\nhidden = 1024\n[cost]\nmodel = \"table\"\n[cost.table.llm]\n"
      "forward = \"" +
      std::to_string(u.f) + "ms\"\ninput_grad = \"" + std::to_string(u.i) +
      "ms\"\nweight_grad = \"" + std::to_string(u.w) +
      "ms\"\nactivation_bytes = \"1MiB\"\noutput_bytes = 0\n"
      "[cluster]\nnodes = 1\ngpus_per_node = 8\ngpu = \"A100-80GB\"\n"
      "intra_node = { bandwidth = \"300GBps\", latency = \"0s\" }\n"
      "inter_node = { bandwidth = \"25GBps\", latency = \"0s\" }\n"
      "[parallel]\npp = " +
      std::to_string(p) + "\n[schedule]\nname = \"" + scheduler +
      "\"\nmicrobatches = " + std::to_string(m) +
      (v == 1 ? "" : "\n[schedule." + scheduler + "]\nchunks = " + std::to_string(v)) +
      "\n[sim]\nbackend = \"evaluator\"\n";
  return prepare_study(dir.write("uniform.toml", config), {});
}

using test::max_span_bubble;

struct ZbCase {
  int p;
  int m;
};

class ZeroBubble : public ::testing::TestWithParam<ZbCase> {};

// The paper's handcrafted schedules assume T_F = T_B = T_W (§2.2); Table 2's formulas
// also hold for the other ratios below, where W is no longer than F or B.
const Units kUnitRatios[] = {{1, 1, 1}, {2, 2, 1}, {1, 2, 1}, {2, 1, 1}};

TEST_P(ZeroBubble, H1BubbleAndPeakFollowTable2) {
  const auto [p, m] = GetParam();
  test::TempDir dir;
  for (const Units u : kUnitRatios) {
    const int per_stage = 2;  // layers per stage
    const auto study = uniform(dir, "zb-h1", p, m, 1, p * per_stage, u);
    validate(study->schedule, study->config.model);
    const Timeline t = evaluate(study->schedule, study->config.cluster);
    const Metrics metrics = compute_metrics(study->schedule, t);
    const double f = per_stage * u.f * 1e-3, b = per_stage * u.i * 1e-3, w = per_stage * u.w * 1e-3;
    const std::string where =
        "F " + std::to_string(u.f) + " I " + std::to_string(u.i) + " W " + std::to_string(u.w);
    if (m >= p) {
      EXPECT_NEAR(max_span_bubble(study->schedule, t), (p - 1) * (f + b - w), 1e-12) << where;
      EXPECT_NEAR(metrics.iteration_time_s, m * (f + b + w) + (p - 1) * (f + b - w), 1e-12)
          << where;
    }
    // Table 2's peak p M_B: stage s holds its 1F1B warm-up plus its s deferred W's
    // microbatches (activations are freed by W), p on every stage.
    for (int s = 0; s < p; ++s)
      EXPECT_EQ(metrics.per_rank[RankId{s}].peak_live_microbatches, std::min(p, m));
  }
}

TEST_P(ZeroBubble, H2BubbleAndPeakFollowTable2) {
  const auto [p, m] = GetParam();
  test::TempDir dir;
  for (const Units u : kUnitRatios) {
    const int per_stage = 2;
    const auto study = uniform(dir, "zb-h2", p, m, 1, p * per_stage, u);
    validate(study->schedule, study->config.model);
    const Timeline t = evaluate(study->schedule, study->config.cluster);
    const Metrics metrics = compute_metrics(study->schedule, t);
    const double f = per_stage * u.f * 1e-3, b = per_stage * u.i * 1e-3, w = per_stage * u.w * 1e-3;
    const std::string where =
        "F " + std::to_string(u.f) + " I " + std::to_string(u.i) + " W " + std::to_string(u.w);
    if (m >= 2 * p - 1) {
      EXPECT_NEAR(max_span_bubble(study->schedule, t), (p - 1) * (f + b - 2 * w), 1e-12) << where;
    }
    for (int s = 0; s < p; ++s)
      EXPECT_EQ(metrics.per_rank[RankId{s}].peak_live_microbatches, std::min(2 * p - 1, m));
  }
}

std::vector<ZbCase> zb_sweep() {
  std::vector<ZbCase> cases;
  for (int p : {1, 2, 3, 4, 8}) {
    for (int m : {1, 3, 4, 8, 16, 24}) cases.push_back({p, m});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Sweep, ZeroBubble, ::testing::ValuesIn(zb_sweep()),
                         [](const auto& param_info) {
                           return "p" + std::to_string(param_info.param.p) + "_m" +
                                  std::to_string(param_info.param.m);
                         });

TEST(ZeroBubble, H1BeatsOneFOneBByTwoWPerStage) {
  // Table 2: 1F1B's bubble (p-1)(T_F+T_B+T_W) minus ZB-H1's is 2(p-1)T_W.
  test::TempDir dir;
  const Units u{1, 1, 1};
  const auto h1 = uniform(dir, "zb-h1", 4, 8, 1, 8, u);
  const double zb = evaluate(h1->schedule, h1->config.cluster).iteration_time_s();
  const auto ofob = uniform(dir, "1f1b", 4, 8, 1, 8, u);
  const double base = evaluate(ofob->schedule, ofob->config.cluster).iteration_time_s();
  EXPECT_NEAR(base - zb, 2 * 3 * 2e-3, 1e-12);
}

TEST(ZeroBubble, WRunsAfterItsIAndDefersSOnStageS) {
  // Stage s of zb-h1 has s deferred W pending, plus the last I's own, when its last I runs.
  const int p = 4, m = 8;
  const StageOrders orders = zb_h1_orders(p, m);
  for (int s = 0; s < p; ++s) {
    int i_done = 0, w_done = 0;
    for (const StageAction& a : orders[StageId{s}]) {
      if (a.pass == Pass::kI) ++i_done;
      if (a.pass == Pass::kW) {
        EXPECT_LT(a.microbatch, MicrobatchId{i_done}) << "W before its I on stage " << s;
        EXPECT_EQ(a.microbatch, MicrobatchId{w_done++}) << "W in microbatch order";
      }
      if (a.pass == Pass::kI && i_done == m) {
        EXPECT_EQ(i_done - w_done, s + 1) << "stage " << s;  // s deferred + this I's W
      }
    }
  }
}

TEST(ZeroBubble, ChunksAreNotTheirOption) {  // "zb-h1 takes no options", exit 2
  test::TempDir dir;
  EXPECT_THROW(uniform(dir, "zb-h1", 2, 4, 2, 8, {}), InputError);
  EXPECT_THROW(uniform(dir, "zb-h2", 2, 4, 2, 8, {}), InputError);
}

}  // namespace
}  // namespace loom
