// Oobleck per-layer profiles: from a Loom model + cost model, and from a measured CSV.
#include <gtest/gtest.h>

#include <fstream>

#include "core/config.hpp"
#include "core/errors.hpp"
#include "core/index.hpp"
#include "schedulers/planners/oobleck/oobleck_planner.hpp"

namespace loom::oobleck {
namespace {

std::string write(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

std::string error_of(const std::string& path) {
  try {
    load_profile_csv(path);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(OobleckProfile, ReadsCsvWithOptionalColumns) {
  const LayerProfile p =
      load_profile_csv(write("oobleck_ok.csv",
                             "layer,forward_s,backward_s,memory_bytes,allreduce_across_nodes_s\n"
                             "0,0.01,0.02,1e9,0.003\n1,0.02,0.04,2e9,0.004\n"));
  ASSERT_EQ(p.size(), 2u);
  EXPECT_DOUBLE_EQ(p[1].backward_s, 0.04);
  EXPECT_DOUBLE_EQ(p[1].state_bytes, 2e9) << "state_bytes defaults to memory_bytes";
  EXPECT_DOUBLE_EQ(p[0].allreduce_across_nodes_s, 0.003);
  EXPECT_DOUBLE_EQ(p[0].allreduce_in_node_s, 0);
}

TEST(OobleckProfile, CsvErrorsNameFileAndLine) {
  const std::string bad_number = write("oobleck_bad.csv",
                                       "layer,forward_s,backward_s,memory_bytes\n"
                                       "0,0.01,0.02,1e9\n1,0.01,abc,1e9\n");
  EXPECT_NE(error_of(bad_number).find("oobleck_bad.csv:3: column 'backward_s'"), std::string::npos)
      << error_of(bad_number);
  const std::string negative =
      write("oobleck_neg.csv", "layer,forward_s,backward_s,memory_bytes\n0,-1,0.02,1e9\n");
  EXPECT_NE(error_of(negative).find("oobleck_neg.csv:2: column 'forward_s'"), std::string::npos);
  const std::string order =
      write("oobleck_order.csv", "layer,forward_s,backward_s,memory_bytes\n1,1,1,1\n");
  EXPECT_NE(error_of(order).find("oobleck_order.csv:2: column 'layer': expected layer 0"),
            std::string::npos);
  const std::string missing = write("oobleck_missing.csv", "layer,forward_s,backward_s\n0,1,1\n");
  EXPECT_NE(error_of(missing).find("oobleck_missing.csv:1: missing column 'memory_bytes'"),
            std::string::npos);
  const std::string fields =
      write("oobleck_fields.csv", "layer,forward_s,backward_s,memory_bytes\n0,1,1\n");
  EXPECT_NE(error_of(fields).find("oobleck_fields.csv:2: expected 4 fields, got 3"),
            std::string::npos);
  const std::string unknown =
      write("oobleck_unknown.csv", "layer,forward_s,backward_s,memory_bytes,flops\n");
  EXPECT_NE(error_of(unknown).find(":1: unknown column 'flops'"), std::string::npos);
  EXPECT_NE(error_of(write("oobleck_empty.csv", "layer,forward_s,backward_s,memory_bytes\n"))
                .find(":2: no layers"),
            std::string::npos);
}

// Frozen status reaches the profile (Eq 3.2-3.3): the frozen ViT has no backward and no
// gradients to synchronise; the trainable projector has both; the frozen LLM backpropagates
// input gradients (B > 0) but synchronises nothing.
TEST(OobleckProfile, FromModelHonoursFrozenLayers) {
  const Config c =
      load_config(std::string(LOOM_SOURCE_DIR) + "/configs/examples/vlm-frozen.toml", {});
  const auto cost = make_cost_model(c);
  const std::vector<Sample> samples = synthetic_samples(2, c.workload.tokens);
  const std::vector<const Sample*> mb{&samples[0], &samples[1]};
  const LayerProfile p = profile_from_model(c.model, *cost, mb, c.cluster, c.cost.memory);
  ASSERT_EQ(isize(p), c.model.num_layers());
  const ModuleId projector = c.model.module_index("projector").value();
  for (int l = 0; l < c.model.num_layers(); ++l) {
    const LayerCost& x = p[static_cast<size_t>(l)];
    const ModuleId module = c.model.module_of(l);
    EXPECT_GT(x.forward_s, 0);
    EXPECT_LE(x.state_bytes, x.memory_bytes);
    if (module == projector) {
      EXPECT_GT(x.backward_s, 0);
      EXPECT_GT(x.allreduce_across_nodes_s, 0);
    } else {
      EXPECT_EQ(x.allreduce_across_nodes_s, 0) << "frozen: no gradients";
      if (module == ModuleId{0}) {
        EXPECT_EQ(x.backward_s, 0) << "nothing trainable upstream";
      } else {
        EXPECT_GT(x.backward_s, 0) << "input gradients for the projector";
      }
    }
  }
}

}  // namespace
}  // namespace loom::oobleck
