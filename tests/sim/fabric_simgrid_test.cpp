// Tiered fabrics in SimGrid (sim/platform.cpp, [cluster.fabric]): a non-blocking tree gives
// the star's timings, an oversubscribed tier slows the all-reduce that crosses it by the
// closed-form factor, placement decides which tier a dimension crosses, and folding stays
// exact where it stays on.
#include <gtest/gtest.h>

#include <set>
#include <simgrid/s4u/Engine.hpp>
#include <simgrid/s4u/Host.hpp>
#include <simgrid/s4u/Link.hpp>

#include "app/study_run.hpp"
#include "core/placement.hpp"
#include "sim/platform.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

/// `nodes` nodes of `gpus` GPUs with one 5 GB/s NIC each and no latency anywhere; each
/// stage of 1 ms per pass and 25M parameters (a 50 MB bf16 gradient all-reduce).
std::string job(int nodes, int gpus, int pp, int dp, const std::string& fabric) {
  return "[[model.modules]]\nname = \"llm\"\nkind = \"llm\"\nlayers = 8\nhidden = 1024\n"
         "[cost]\nmodel = \"table\"\n[cost.table.llm]\nforward = \"1ms\"\nbackward = \"2ms\"\n"
         "activation_bytes = \"1MiB\"\noutput_bytes = \"4MiB\"\nparameters = 2.5e7\n"
         "[cluster]\nnodes = " +
         std::to_string(nodes) + "\ngpus_per_node = " + std::to_string(gpus) +
         "\nnics_per_node = 1\nintra_node = { bandwidth = \"100GBps\", latency = \"0s\" }\n"
         "inter_node = { bandwidth = \"5GBps\", latency = \"0s\" }\n" +
         fabric + "\n[parallel]\npp = " + std::to_string(pp) + "\ndp = " + std::to_string(dp) +
         "\n[schedule]\nname = \"1f1b\"\nmicrobatches = 4\n";
}

std::string tree(int nodes_per_leaf, int leaves_per_pod, const std::string& oversubscription) {
  return "[cluster.fabric]\nkind = \"fat-tree\"\nnodes_per_leaf = " +
         std::to_string(nodes_per_leaf) +
         (leaves_per_pod > 0 ? "\nleaves_per_pod = " + std::to_string(leaves_per_pod) : "") +
         "\noversubscription = " + oversubscription + "\n";
}

TEST(FabricSimGrid, SimGridRoutesAreCoresRoutes) {
  // Three tiers (leaves of 2 nodes, pods of 2 leaves) and only some nodes built: every
  // route SimGrid's hierarchical routing finds is core's route(), link for link, each in
  // its direction.
  simgrid::s4u::Engine engine("fabric-routes");
  Cluster c = test::small_cluster(8, 2);
  c.fabric = {FabricKind::kFatTree, 2, 2, {1, 7}, {}};
  const std::set<int> nodes = {0, 1, 2, 5, 6};
  const sim::PerGpu<simgrid::s4u::Host*> hosts = sim::build_platform(c, nodes);
  for (const int a : nodes) {
    for (const int b : nodes) {
      for (const int ga : {2 * a, 2 * a + 1}) {
        const int gb = 2 * b;
        if (ga == gb) continue;  // a GPU's messages to itself never reach the network
        std::vector<simgrid::s4u::Link*> links;
        double latency = 0;
        hosts[sim::GpuId{ga}]->route_to(hosts[sim::GpuId{gb}], links, &latency);
        std::vector<std::string> simgrid, core;
        for (const simgrid::s4u::Link* l : links) simgrid.push_back(l->get_name());
        for (const Hop& h : route(c, ga, gb))
          core.push_back(network_link(c, h.link).name + (h.up ? "_UP" : "_DOWN"));
        EXPECT_EQ(simgrid, core) << ga << " -> " << gb;
      }
    }
  }
}

TEST(FabricSimGrid, NonBlockingTreeTimesAsTheStar) {
  test::TempDir dir;
  const std::string star = dir.write("star.toml", job(16, 4, 4, 16, ""));
  const std::string fat = dir.write("tree.toml", job(16, 4, 4, 16, tree(2, 2, "[1, 1]")));
  const std::vector<std::string> whole = {"sim.fold=false"};
  const double t_star = iteration_time(star, whole, "simgrid");
  EXPECT_NEAR(iteration_time(fat, whole, "simgrid") / t_star, 1.0, 1e-12);
  EXPECT_NEAR(iteration_time(fat, {}, "simgrid") / t_star, 1.0, 1e-9);  // folds as the star
}

TEST(FabricSimGrid, OversubscriptionSlowsTheCrossingAllReduceByTheClosedForm) {
  // 4 one-GPU nodes, leaves of 2: the data-parallel ring 0-1-2-3 crosses the spine twice,
  // one stream up and one down each leaf trunk of 2 x 5 GB/s / k. The NIC (5 GB/s) binds
  // up to k = 2; beyond, the trunk does: the all-reduce takes max(1, k / 2) times as long.
  test::TempDir dir;
  const std::string alone = dir.write("dp1.toml", job(4, 1, 1, 1, ""));
  const double compute = iteration_time(alone, {}, "simgrid");
  double base = 0;
  for (const double k : {1.0, 2.0, 4.0, 7.0}) {
    const std::string path =
        dir.write("k.toml", job(4, 1, 1, 4, tree(2, 0, "[" + std::to_string(k) + "]")));
    const double all_reduce = iteration_time(path, {}, "simgrid") - compute;
    if (k == 1) base = all_reduce;
    EXPECT_NEAR(all_reduce / base, std::max(1.0, k / 2), 1e-9) << "oversubscription " << k;
  }
  EXPECT_GT(base, 0.01);  // 3 x 50 MB / 4 at 5 GB/s: the all-reduce is there to slow
}

TEST(FabricSimGrid, PlacementDecidesWhichTierADimensionCrosses) {
  // pp 4 x dp 4 on 16 one-GPU nodes, leaves of 4 nodes, 4:1 oversubscribed. Loom's order
  // keeps a pipeline in a leaf and sends the data-parallel rings across leaves; Megatron's
  // puts the data-parallel ranks side by side and the pipeline across leaves.
  test::TempDir dir;
  const std::string path = dir.write("job.toml", job(16, 1, 4, 4, tree(4, 0, "[4]")));
  const Config loom_order = load_config(path, {});
  const Config megatron = load_config(path, {"parallel.order=\"tp-cp-dp-pp\""});
  auto reach = [](const Config& c, const std::string& dim) {
    for (const DimensionReach& d : dimension_reach(c.parallel, c.parallel.pp, c.cluster))
      if (d.dimension == dim) return std::string(describe(d.reach, c.cluster));
    return std::string("absent");
  };
  EXPECT_EQ(reach(loom_order, "pp"), "within a leaf");
  EXPECT_EQ(reach(loom_order, "dp"), "across leaves");
  EXPECT_EQ(reach(megatron, "pp"), "across leaves");
  EXPECT_EQ(reach(megatron, "dp"), "within a leaf");
  // The 50 MB gradient rings outweigh the 4 MiB activations: keeping them in a leaf wins.
  const double dp_across = iteration_time(path, {"sim.fold=false"}, "simgrid");
  const double dp_inside = iteration_time(path, {"parallel.order=\"tp-cp-dp-pp\""}, "simgrid");
  EXPECT_LT(dp_inside, 0.8 * dp_across) << dp_inside << " vs " << dp_across;
}

TEST(FabricSimGrid, FoldsWholePodsOfABlockingFabricExactly) {
  // pp 4 on 4-GPU nodes, leaves of 2 nodes, pods of 2 leaves: 4 replicas per pod. 16
  // replicas fill 4 pods; the fold keeps 2 pods (8 replicas), as the star would keep 2.
  test::TempDir dir;
  const std::string path = dir.write("job.toml", job(16, 4, 4, 16, tree(2, 2, "[3, 7]")));
  const auto folded = prepare_study(path, {}, Folding::kAllowed);
  ASSERT_TRUE(folded->fold.folded()) << folded->fold.describe();
  EXPECT_EQ(folded->fold.simulated, 8);
  const double whole = iteration_time(path, {"sim.fold=false"}, "simgrid");
  EXPECT_NEAR(iteration_time(path, {}, "simgrid") / whole, 1.0, 1e-9);
  // Six replicas in pods of four: the pods differ, so it does not fold, and says why.
  const auto six = prepare_study(dir.write("six.toml", job(16, 4, 4, 6, tree(2, 2, "[3, 7]"))), {},
                                 Folding::kAllowed);
  EXPECT_FALSE(six->fold.folded());
  EXPECT_NE(six->fold.reason.find("not whole blocks of 4 (the replicas that fill whole pods of "
                                  "the blocking fabric)"),
            std::string::npos)
      << six->fold.reason;
  // Megatron's order (dp inside pp): 16 replicas' copies of a stage fill a pod, 64 replicas
  // four pods per stage; the fold keeps 32, two pods per stage, and every pipeline hop
  // still crosses the core between pods.
  const std::string megatron = dir.write("megatron.toml", job(64, 4, 4, 64, tree(2, 2, "[3, 7]")));
  const std::vector<std::string> order = {"parallel.order=\"tp-cp-dp-pp\""};
  const auto stages_apart = prepare_study(megatron, order, Folding::kAllowed);
  ASSERT_TRUE(stages_apart->fold.folded()) << stages_apart->fold.describe();
  EXPECT_EQ(stages_apart->fold.simulated, 32);
  std::vector<std::string> unfolded = order;
  unfolded.push_back("sim.fold=false");
  EXPECT_NEAR(
      iteration_time(megatron, order, "simgrid") / iteration_time(megatron, unfolded, "simgrid"),
      1.0, 1e-9);
}

}  // namespace
}  // namespace loom
