// Tiered fabrics (core/cluster.hpp, [cluster.fabric]): the routes and trunks of a fat-tree,
// the star's timings on a non-blocking one, and the errors a user meets.
#include <gtest/gtest.h>

#include "core/cluster.hpp"
#include "core/config.hpp"
#include "core/evaluator.hpp"
#include "core/link_load.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

/// 8 nodes of 4 GPUs: leaves of 2 nodes, pods of 2 leaves (4 leaves, 2 pods), 1 NIC.
Cluster three_tier(std::vector<double> oversubscription, std::vector<double> latency = {}) {
  Cluster c = test::small_cluster(8, 4);
  c.fabric.kind = FabricKind::kFatTree;
  c.fabric.nodes_per_leaf = 2;
  c.fabric.leaves_per_pod = 2;
  c.fabric.oversubscription = std::move(oversubscription);
  c.fabric.tier_latency = std::move(latency);
  return c;
}

std::vector<std::string> names(const Cluster& c, const std::vector<Hop>& hops) {
  std::vector<std::string> out;
  for (const Hop& h : hops) out.push_back(network_link(c, h.link).name + (h.up ? "^" : "v"));
  return out;
}

TEST(Fabric, RoutesClimbOnlyTheTiersTheyCross) {
  const Cluster c = three_tier({1, 1});
  EXPECT_EQ(c.num_leaves(), 4);
  EXPECT_EQ(c.num_pods(), 2);
  using V = std::vector<std::string>;
  EXPECT_EQ(names(c, route(c, 0, 1)), (V{"gpu-0^", "gpu-1v"}));                      // NVLink
  EXPECT_EQ(names(c, route(c, 0, 4)), (V{"gpu-0^", "nic-0^", "nic-1v", "gpu-4v"}));  // one leaf
  EXPECT_EQ(names(c, route(c, 0, 8)),
            (V{"gpu-0^", "nic-0^", "leaf-0-up^", "leaf-1-upv", "nic-2v", "gpu-8v"}));
  EXPECT_EQ(names(c, route(c, 4, 31)), (V{"gpu-4^", "nic-1^", "leaf-0-up^", "pod-0-up^",
                                          "pod-1-upv", "leaf-3-upv", "nic-7v", "gpu-31v"}));
  EXPECT_EQ(network_links(c).size(), 32u + 8u + 4u + 2u);
  for (int i = 0; i < isize(network_links(c)); ++i)
    EXPECT_EQ(network_links(c)[i].name, network_link(c, i).name);
}

TEST(Fabric, TrunksCarryTheirDownlinksOverTheOversubscription) {
  // A leaf's downlinks: 2 nodes x 1 NIC x 5 GB/s = 10 GB/s; over 2:1, 5 GB/s up. A pod's:
  // 2 leaves x 5 GB/s = 10 GB/s; over 4:1, 2.5 GB/s.
  const Cluster c = three_tier({2, 4});
  EXPECT_DOUBLE_EQ(network_link(c, leaf_uplink_index(c, 3)).bandwidth, 5e9);
  EXPECT_EQ(network_link(c, leaf_uplink_index(c, 3)).tier, LinkTier::kLeafUplink);
  EXPECT_DOUBLE_EQ(network_link(c, pod_uplink_index(c, 1)).bandwidth, 2.5e9);
  EXPECT_EQ(network_link(c, pod_uplink_index(c, 1)).tier, LinkTier::kPodUplink);
  // One flow alone: the NIC (5 GB/s) binds in a leaf, the pod trunk (2.5 GB/s) across pods.
  EXPECT_DOUBLE_EQ(transfer_time(c, 0, 8, 5e9), 12e-6 + 1.0);
  EXPECT_DOUBLE_EQ(transfer_time(c, 0, 16, 5e9), 12e-6 + 2.0);
}

TEST(Fabric, NonBlockingWithoutTierLatencyTimesAsTheStar) {
  const Cluster star = test::small_cluster(8, 4);
  const Cluster tree = three_tier({1, 1});
  EXPECT_TRUE(tree.fabric.non_blocking());
  for (int a = 0; a < star.num_gpus(); ++a) {
    for (int b = 0; b < star.num_gpus(); ++b) {
      for (const double bytes : {0.0, 1e6}) {
        ASSERT_EQ(transfer_time(tree, a, b, bytes, 2), transfer_time(star, a, b, bytes, 2))
            << a << " -> " << b;
      }
    }
  }
}

TEST(Fabric, EachTierCrossedAddsItsLatency) {
  const Cluster c = three_tier({1, 1}, {1e-6, 3e-6});
  EXPECT_FALSE(c.fabric.non_blocking());
  EXPECT_DOUBLE_EQ(transfer_time(c, 0, 4, 0), 12e-6);
  EXPECT_DOUBLE_EQ(transfer_time(c, 0, 8, 0), 13e-6);
  EXPECT_DOUBLE_EQ(transfer_time(c, 0, 16, 0), 16e-6);
  // SimGrid sums the links' own latencies: half a tier's on each of its two trunks.
  double sum = 0;
  for (const Hop& h : route(c, 0, 16)) sum += network_link(c, h.link).latency;
  EXPECT_DOUBLE_EQ(sum, 16e-6);
}

TEST(Fabric, ATpGroupsCopiesShareTheLinksItsGpusShare) {
  // A rank of tp 4 stands for 4 GPU flows: the node's NICs and the trunks offer each copy a
  // quarter, its GPU's own link all of it; a flow alone is still held to one NIC.
  Cluster c = three_tier({1, 1});
  c.nics_per_node = 4;
  const Cluster one = c;
  c.flow_copies = 4;
  EXPECT_DOUBLE_EQ(network_link(c, c.num_gpus()).bandwidth, 5e9);  // 4 NICs x 5 GB/s / 4
  EXPECT_DOUBLE_EQ(network_link(c, leaf_uplink_index(c, 0)).bandwidth,
                   network_link(one, leaf_uplink_index(one, 0)).bandwidth / 4);
  EXPECT_DOUBLE_EQ(network_link(c, 0).bandwidth, network_link(one, 0).bandwidth);
  for (const int dst : {4, 8, 16})
    EXPECT_DOUBLE_EQ(transfer_time(c, 0, dst, 1e9, 4), transfer_time(one, 0, dst, 1e9, 4)) << dst;
  // A study's ranks are its TP groups (Megatron's 39.1B GPT: TP 8).
  EXPECT_EQ(test::megatron_gpt()->config.cluster.flow_copies, 8);
}

TEST(Fabric, TheBusiestLinksRateOverTimeIsATraceCounter) {
  // One 1 GB message between two nodes: the NIC it leaves by carries 1 GB over the
  // message's time, and nothing after it.
  const Cluster c = test::small_cluster(2, 4);
  Schedule s = test::ranks_on({0, 4});
  s.programs[RankId{0}] = {test::send_op(RankId{1}, 0, test::edge_tag(Pass::kF, 0, 1), 1e9)};
  s.programs[RankId{1}] = {test::recv_op(RankId{0}, 1, test::edge_tag(Pass::kF, 0, 1), 1e9)};
  const Timeline t = evaluate(s, c);
  const std::vector<CounterTrack> tracks = busiest_link_tracks(s, c, t);
  ASSERT_EQ(tracks.size(), 1u);  // the NIC tier; GPU links are the ranks' own tracks
  EXPECT_EQ(tracks[0].name, "nic-0 up");
  const double end = t.iteration_time_s();
  EXPECT_NEAR(end, 12e-6 + 0.2, 1e-12);
  ASSERT_EQ(tracks[0].points.size(), 3u);
  EXPECT_DOUBLE_EQ(tracks[0].points[1].second, 1.0 / end);  // GB/s
  EXPECT_EQ(tracks[0].points[2], std::make_pair(end, 0.0));
}

std::string fabric_error(const std::vector<std::string>& fabric) {
  std::vector<std::string> overrides = {"cluster.nodes=16", "parallel.dp=8"};
  overrides.insert(overrides.end(), fabric.begin(), fabric.end());
  return test::input_error(
      [&] { load_config(test::source_path("configs/examples/uniform-1f1b.toml"), overrides); });
}

TEST(Fabric, ConfigReadsDefaultsFromA64PortSwitch) {
  const Config fat = load_config(test::source_path("configs/examples/uniform-1f1b.toml"),
                                 {"cluster.nodes=64", "cluster.fabric.kind=\"fat-tree\""});
  EXPECT_EQ(fat.cluster.fabric.nodes_per_leaf, 32 / fat.cluster.nics_per_node);
  EXPECT_EQ(fat.cluster.fabric.oversubscription, std::vector<double>{1});
  const Config rail =
      load_config(test::source_path("configs/examples/uniform-1f1b.toml"),
                  {"cluster.nodes=64", "cluster.fabric.kind=\"rail-optimized\"",
                   "cluster.fabric.leaves_per_pod=1", "cluster.fabric.oversubscription=[1, 3]"});
  EXPECT_EQ(rail.cluster.fabric.nodes_per_leaf, 32);
  EXPECT_EQ(rail.cluster.num_pods(), 2);
  EXPECT_EQ(rail.cluster.fabric.tiers(), 2);
}

TEST(Fabric, TheDefaultLeafKeepsWholeLeavesOnAnyNodeCount) {
  // 8 NICs per node: a 64-port leaf takes 4 nodes, but 6 nodes make leaves of 3 (a sweep
  // over cluster.nodes, a replay's shrinking cluster).
  const Config c = load_config(
      test::source_path("configs/examples/uniform-1f1b.toml"),
      {"cluster.nodes=6", "cluster.nics_per_node=8", "cluster.fabric.kind=\"fat-tree\""});
  EXPECT_EQ(c.cluster.fabric.nodes_per_leaf, 3);
  EXPECT_EQ(c.cluster.num_leaves(), 2);
}

TEST(Fabric, BadInputsNameTheKeyAndTheFix) {
  const std::string kind = "cluster.fabric.kind=\"fat-tree\"";
  std::string e = fabric_error({kind, "cluster.fabric.nodes_per_leaf=3"});
  EXPECT_NE(e.find("cluster.fabric.nodes_per_leaf"), std::string::npos) << e;
  EXPECT_NE(e.find("16 nodes are not whole leaves of 3"), std::string::npos) << e;
  e = fabric_error({kind, "cluster.fabric.nodes_per_leaf=2", "cluster.fabric.leaves_per_pod=3"});
  EXPECT_NE(e.find("8 leaves are not whole pods of 3"), std::string::npos) << e;
  e = fabric_error({kind, "cluster.fabric.oversubscription=[1, 7]"});
  EXPECT_NE(e.find("cluster.fabric.oversubscription"), std::string::npos) << e;
  EXPECT_NE(e.find("has 2 entries; write one entry"), std::string::npos) << e;
  e = fabric_error({kind, "cluster.fabric.nodes_per_leaf=2", "cluster.fabric.leaves_per_pod=2",
                    "cluster.fabric.tier_latency=[\"1us\"]"});
  EXPECT_NE(e.find("cluster.fabric.tier_latency"), std::string::npos) << e;
  EXPECT_NE(e.find("write two entries"), std::string::npos) << e;
  e = fabric_error({kind, "cluster.fabric.oversubscription=[0.5]"});
  EXPECT_NE(e.find("each at least 1"), std::string::npos) << e;
  e = fabric_error({"cluster.fabric.nodes_per_leaf=2"});
  EXPECT_NE(e.find("a star has no tiers"), std::string::npos) << e;
  e = fabric_error({"cluster.fabric.kind=\"torus\""});
  EXPECT_NE(e.find("cluster.fabric.kind"), std::string::npos) << e;
}

}  // namespace
}  // namespace loom
