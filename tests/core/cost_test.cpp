#include <gtest/gtest.h>

#include <cmath>

#include "core/cost_analytical.hpp"
#include "core/cost_calibrated.hpp"
#include "core/errors.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

Model one_layer_model(bool causal) {
  Module m;
  m.name = "llm";
  LayerSpec l;
  l.hidden = 1024;
  l.ffn = 4096;
  l.heads = 16;
  l.kv_heads = 16;
  l.causal = causal;
  l.out_hidden = 1024;
  m.layers = {l};
  return Model({m});
}

Cluster unit_cluster() {
  Cluster c;
  c.gpus_per_node = 8;
  c.gpu = {"test", 1e12, 1e12, 80e9};
  c.intra_node = {100e9, 1e-6};
  c.inter_node = {25e9, 5e-6};
  return c;
}

}  // namespace

TEST(AnalyticalCost, FlopsOfATransformerLayer) {
  const Model model = one_layer_model(false);
  AnalyticalCostModel cost(model, unit_cluster(), 1.0);
  const MicrobatchShape shape{{1000}};
  const double h = 1024, f = 4096, s = 1000;
  const double linear = 2 * s * (4 * h * h + 2 * h * f);
  const double attention = 4 * s * s * h;
  const PassCost c = cost.layer_cost(0, shape, 1);
  EXPECT_NEAR(c.forward_s, (linear + attention) / 1e12, 1e-12);
  EXPECT_NEAR(c.input_grad_s, (linear + 2 * attention) / 1e12, 1e-12);
  EXPECT_NEAR(c.weight_grad_s, linear / 1e12, 1e-12);
  // Attention is quadratic per sequence: two sequences of 500 cost less than one of 1000.
  const PassCost split = cost.layer_cost(0, MicrobatchShape{{500, 500}}, 1);
  EXPECT_NEAR(c.forward_s - split.forward_s, (4 * h * (1000.0 * 1000 - 2 * 500.0 * 500)) / 1e12,
              1e-12);
}

TEST(AnalyticalCost, CausalHalvesAttentionAndTensorParallelDividesCompute) {
  const Model causal = one_layer_model(true);
  const Cluster cluster = unit_cluster();
  AnalyticalCostModel cost(causal, cluster, 0.5);
  const MicrobatchShape shape{{2048}};
  const double h = 1024, s = 2048;
  const double linear = 2 * s * (4 * h * h + 2 * h * 4096);
  const double attention = 0.5 * 4 * s * s * h;
  const PassCost tp1 = cost.layer_cost(0, shape, 1);
  EXPECT_NEAR(tp1.forward_s, (linear + attention) / 0.5e12, 1e-12);
  const PassCost tp4 = cost.layer_cost(0, shape, 4);
  const double bytes = s * h * 2;
  const double allreduce = 2.0 * 3 / 4 * bytes / 100e9 + 2.0 * 3 * 1e-6;
  EXPECT_NEAR(tp4.forward_s, (linear + attention) / (4 * 0.5e12) + 2 * allreduce, 1e-12);
  EXPECT_NEAR(tp4.weight_grad_s, linear / (4 * 0.5e12), 1e-12);
  EXPECT_LT(cost.activation_bytes(0, shape, 4), cost.activation_bytes(0, shape, 1));
  EXPECT_DOUBLE_EQ(cost.output_bytes(0, shape), s * h * 2);
}

TEST(CalibratedCost, LeastSquaresRecoversAQuadratic) {
  std::vector<double> x = {64, 256, 1024, 4096, 16384};
  std::vector<double> y;
  for (double v : x) y.push_back(2e-10 * v * v + 3e-7 * v + 5e-5);
  const QuadraticFit fit = fit_quadratic(x, y);
  EXPECT_NEAR(fit.a, 2e-10, 1e-15);
  EXPECT_NEAR(fit.b, 3e-7, 1e-11);
  EXPECT_NEAR(fit.c, 5e-5, 1e-9);
  EXPECT_LT(fit.max_relative_residual, 1e-6);
}

TEST(CalibratedCost, FitsAProfileAndReportsResiduals) {
  test::TempDir dir;
  std::string csv = "layer,phase,tokens,tp,seconds\n";
  for (int x : {128, 512, 2048, 8192}) {
    const double t = 1e-10 * x * x + 2e-7 * x + 1e-4;
    for (const char* phase : {"F", "I", "W"}) {
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%.12g", t * (phase[0] == 'F' ? 1 : 1.5));
      csv += std::string("llm,") + phase + "," + std::to_string(x) + ",1," + seconds + "\n";
    }
  }
  const Model model = one_layer_model(true);
  CalibratedCostModel cost(model, unit_cluster(), dir.write("profile.csv", csv));
  const PassCost c = cost.layer_cost(0, MicrobatchShape{{1000}}, 1);
  EXPECT_NEAR(c.forward_s, 1e-10 * 1e6 + 2e-7 * 1000 + 1e-4, 1e-7);
  EXPECT_NEAR(c.input_grad_s, 1.5 * c.forward_s, 1e-6);
  const auto desc = cost.describe();
  ASSERT_EQ(desc["fits"].size(), 3u);
  EXPECT_LT(desc["fits"][0]["max_relative_residual"].get<double>(), 1e-3);
  // A layer the profile does not cover is an error naming it.
  EXPECT_THROW(cost.layer_cost(0, MicrobatchShape{{1000}}, 2), InputError);
}

TEST(CalibratedCost, MalformedProfileNamesFileAndLine) {
  test::TempDir dir;
  const std::string bad =
      dir.write("bad.csv", "layer,phase,tokens,tp,seconds\nllm,F,128,1,0.1\nllm,F,abc,1,0.2\n");
  const Model model = one_layer_model(true);
  try {
    CalibratedCostModel cost(model, unit_cluster(), bad);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.csv"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("3"), std::string::npos) << e.what();
  }
  const std::string few =
      dir.write("few.csv", "layer,phase,tokens,tp,seconds\nllm,F,128,1,0.1\nllm,F,256,1,0.2\n");
  EXPECT_THROW(CalibratedCostModel(model, unit_cluster(), few), InputError);
}

}  // namespace loom
