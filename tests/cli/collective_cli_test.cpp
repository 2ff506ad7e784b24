// `loom collective` (cli/cmd_collective.cpp): nccl-tests' sizes doubling, NCCL's choice per
// size, JSON for scripts, and the fabric's trunks in the bottleneck.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_support.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

const std::string kDgx =
    " --set 'cluster.gpu=\"H100\"' --set 'cluster.intra_node={ preset = \"nvlink4\" }'"
    " --set 'cluster.inter_node={ preset = \"ib-ndr\" }'";

TEST(CollectiveCli, DoublesSizesAndPicksTheFastestAlgorithmForEach) {
  const test::CliResult r =
      test::run_loom("collective " + test::source_path("configs/examples/uniform-1f1b.toml") +
                         kDgx + " --set cluster.nodes=4 --size 1KiB:1GiB --json",
                     "2>/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["gpus"], 32);
  ASSERT_EQ(j["rows"].size(), 21u);  // 1 KiB, 2 KiB, ..., 1 GiB
  for (const nlohmann::json& row : j["rows"]) {
    double fastest = 1e300;
    for (const nlohmann::json& a : row["algorithms"])
      if (a["applies"]) fastest = std::min(fastest, a["time_s"].get<double>());
    EXPECT_EQ(row["time_s"].get<double>(), fastest) << row;
  }
  EXPECT_EQ(j["rows"][0]["choice"], "tree");  // latency-bound: the tree's few hops
}

TEST(CollectiveCli, AnOversubscribedLeafShowsAsTheRingsBottleneck) {
  // Two 8-GPU nodes per leaf, 7:1 up (2 x 400 / 7 GB/s): the ring's 8 channels leave each
  // node at 400 GB/s and meet the trunk.
  const test::CliResult r = test::run_loom(
      "collective " + test::source_path("configs/examples/uniform-1f1b.toml") + kDgx +
      " --set cluster.nodes=4 --set 'cluster.fabric.kind=\"fat-tree\"' --set "
      "cluster.fabric.nodes_per_leaf=2 --set 'cluster.fabric.oversubscription=[7]' "
      "--op all-gather --size 1GiB");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("all-gather over 32 GPUs (4 nodes x 8"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("leaf-"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("fat-tree fabric"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace loom
