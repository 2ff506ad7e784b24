// `loom profile` closes the loop profile -> calibrated -> sim: its rows are exactly what
// CalibratedCostModel reads, and a TP degree is timed as one GPU's shard.
#include "executor/profile.hpp"

#include <gtest/gtest.h>

#include "core/cost_calibrated.hpp"
#include "executor/layer_math.hpp"
#include "test_support.hpp"

namespace loom::exec {
namespace {

TEST(Profile, TpShardSplitsHeadsAndFfnAndKeepsTheResidualWidth) {
  LayerSpec s;
  s.hidden = 96;
  s.ffn = 192;
  s.heads = 4;
  s.kv_heads = 2;
  LayerSpec shard;
  ASSERT_TRUE(tp_shard(s, 2, &shard));
  EXPECT_EQ(shard.heads, 2);
  EXPECT_EQ(shard.kv_heads, 1);
  EXPECT_EQ(shard.ffn, 96);
  EXPECT_EQ(shard.hidden, 96);
  ASSERT_TRUE(tp_shard(s, 4, &shard));
  EXPECT_EQ(shard.kv_heads, 1);  // fewer KV heads than GPUs: replicated
  EXPECT_FALSE(tp_shard(s, 3, &shard));
  // The shard's Q projection is hidden x (heads/t x head width): a t-th of the layer's.
  ASSERT_TRUE(tp_shard(s, 4, &shard));
  const LayerTensors p = zero_parameters(shard, s.hidden / s.heads);
  EXPECT_EQ(p.at("wq").rows, 96);
  EXPECT_EQ(p.at("wq").cols, 24);
}

TEST(Profile, RowsCoverEveryModulePhaseTokenCountAndTp) {
  const auto study = prepare_study(test::source_path("configs/exec/vlm-host.toml"), {});
  ProfileRequest request;
  request.repeats = 1;
  request.tp = {1, 2};
  const auto rows = profile_host(study->config.model, study->problem.samples.front(), request);
  // 3 modules x 5 token counts x 3 phases x 2 TP degrees (all shapes divide by 2).
  EXPECT_EQ(rows.size(), 3u * 5 * 3 * 2);
  for (const ProfileRow& r : rows) {
    EXPECT_GT(r.seconds, 0) << r.layer << " " << r.phase << " " << r.tokens;
    EXPECT_TRUE(r.phase == 'F' || r.phase == 'I' || r.phase == 'W');
  }
}

TEST(Profile, CsvIsWhatTheCalibratedModelFits) {
  // Rows on an exact quadratic per phase: the calibrated model must give them back.
  const auto study = prepare_study(test::source_path("configs/exec/vlm-host.toml"), {});
  std::vector<ProfileRow> rows;
  for (const Module& m : study->config.model.modules()) {
    for (int x : {8, 16, 32, 64}) {
      rows.push_back({m.name, 'F', x, 1, 1e-8 * x * x + 1e-5 * x + 1e-4});
      rows.push_back({m.name, 'I', x, 1, 2e-8 * x * x + 2e-5 * x});
      rows.push_back({m.name, 'W', x, 1, 3e-5 * x + 2e-4});
    }
  }
  test::TempDir dir;
  const std::string csv = dir.path("profile.csv");
  write_profile_csv(csv, rows);
  const CalibratedCostModel cost(study->config.model, study->config.cluster, csv);
  MicrobatchShape shape;
  shape.sequence_lengths = {40, 24};
  const PassCost c = cost.layer_cost(0, shape, 1);
  EXPECT_NEAR(c.forward_s, 1e-8 * (1600 + 576) + 1e-5 * 64 + 1e-4, 1e-9);
  EXPECT_NEAR(c.input_grad_s, 2e-8 * (1600 + 576) + 2e-5 * 64, 1e-9);
  EXPECT_NEAR(c.weight_grad_s, 3e-5 * 64 + 2e-4, 1e-9);
}

}  // namespace
}  // namespace loom::exec
