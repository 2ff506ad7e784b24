// Oobleck reinstantiation (dissertation §2.5.1, Fig 2.8, App. A.2) and layer copies.
#include <gtest/gtest.h>

#include <set>

#include "core/errors.hpp"
#include "core/index.hpp"
#include "schedulers/planners/oobleck/oobleck_planner.hpp"

namespace loom::oobleck {
namespace {

struct Fixture {
  PlanningProblem p;
  PerTemplate<PipelineTemplate> ts;
};

/// 12 layers of 1 GB on 6 GB GPUs, one GPU per node: n_0 = 2; templates 2 .. N - f n_0.
Fixture fixture(int N, int f) {
  Fixture fx;
  for (int l = 0; l < 12; ++l) {
    LayerCost c;
    c.forward_s = 0.01;
    c.backward_s = 0.02;
    c.memory_bytes = 1e9;
    c.state_bytes = 0.25e9;
    fx.p.layers.push_back(c);
  }
  fx.p.gpu_memory_bytes = 6e9;
  fx.p.max_nodes = N;
  fx.p.fault_tolerance = f;
  fx.p.global_batch = 64;
  fx.ts = generate_templates(fx.p);
  return fx;
}

/// Pipelines of the given node lists (sizes pick the templates), batch distributed.
Instantiation by_hand(const Fixture& fx, const std::vector<std::vector<int>>& nodes) {
  Instantiation inst;
  inst.counts = PerTemplate<int>(fx.ts.ssize(), 0);
  for (const auto& n : nodes) {
    const TemplateId t{isize(n) - fx.ts.front().nodes};
    inst.pipelines.push_back({t, PerPipelineNode<int>(n), 0});
    ++inst.counts[t];
  }
  distribute_batch(fx.p, fx.ts, inst);
  return inst;
}

std::vector<size_t> sizes(const Instantiation& inst) {
  std::vector<size_t> s;
  for (const Pipeline& p : inst.pipelines) s.push_back(p.nodes.size());
  return s;
}

/// Copies never come from a lost node, and after them every node holds its layers.
void check_copies(const Fixture& fx, const Reinstantiation& r, const std::set<int>& lost) {
  for (const LayerCopy& c : r.copies) {
    EXPECT_FALSE(lost.count(c.from_node)) << "copy from a failed node";
    EXPECT_NE(c.from_node, c.to_node);
    EXPECT_DOUBLE_EQ(c.bytes, fx.p.layers[static_cast<size_t>(c.layer)].state_bytes);
  }
  int microbatches = 0;
  for (const Pipeline& p : r.next.pipelines) microbatches += p.microbatches;
  EXPECT_EQ(microbatches * fx.p.microbatch_size, fx.p.global_batch) << "batch redistributed";
}

// Fig 2.8a: a 4-node pipeline loses a node and becomes a 3-node pipeline.
TEST(OobleckReinstantiate, Simple) {
  const Fixture fx = fixture(9, 1);
  const Instantiation cur = by_hand(fx, {{0, 1, 2, 3}, {4, 5}, {6, 7}});
  const Reinstantiation r = reinstantiate(fx.p, fx.ts, cur, {1}, {});
  EXPECT_EQ(r.kind, ReconfigurationCase::kSimple);
  EXPECT_EQ(sizes(r.next), (std::vector<size_t>{3, 2, 2}));
  EXPECT_EQ(r.next.pipelines[0].nodes, (PerPipelineNode<int>{0, 2, 3}));
  EXPECT_FALSE(r.copies.empty()) << "node 1's layers move to the survivors";
  check_copies(fx, r, {1});
  // Unaffected pipelines keep their layers: nothing is copied to them.
  for (const LayerCopy& c : r.copies) EXPECT_LE(c.to_node, 3);
}

// Fig 2.8b: a 2-node pipeline keeps one node and borrows one from the 3-node pipeline.
TEST(OobleckReinstantiate, BorrowNodes) {
  const Fixture fx = fixture(9, 1);
  const Instantiation cur = by_hand(fx, {{0, 1, 2}, {3, 4}, {5, 6}});
  const Reinstantiation r = reinstantiate(fx.p, fx.ts, cur, {4}, {});
  EXPECT_EQ(r.kind, ReconfigurationCase::kBorrow);
  EXPECT_EQ(sizes(r.next), (std::vector<size_t>{2, 2, 2}));
  EXPECT_EQ(r.next.pipelines[1].nodes, (PerPipelineNode<int>{3, 2}));  // node 2 lent
  check_copies(fx, r, {4});
}

// Fig 2.8c: every other pipeline has exactly n_0 nodes, so the broken one merges; the merged
// pipeline has 2 n_0 - k = 3 nodes and a template exists (App. A.2).
TEST(OobleckReinstantiate, MergePipelines) {
  const Fixture fx = fixture(9, 1);
  const Instantiation cur = by_hand(fx, {{0, 1}, {2, 3}, {4, 5}});
  const Reinstantiation r = reinstantiate(fx.p, fx.ts, cur, {1}, {});
  EXPECT_EQ(r.kind, ReconfigurationCase::kMerge);
  EXPECT_EQ(sizes(r.next), (std::vector<size_t>{3, 2}));
  EXPECT_EQ(r.next.num_nodes(), 5);
  EXPECT_GE(r.next.pipelines.size(), 2u);  // still f + 1 replicas
  check_copies(fx, r, {1});
}

TEST(OobleckReinstantiate, AddedNodesFormPipelinesOrGrowOnes) {
  const Fixture fx = fixture(9, 1);
  const Instantiation cur = by_hand(fx, {{0, 1}, {2, 3}});
  const Reinstantiation r = reinstantiate(fx.p, fx.ts, cur, {}, {7, 8, 9});
  EXPECT_EQ(r.kind, ReconfigurationCase::kAddNodes);
  EXPECT_EQ(sizes(r.next), (std::vector<size_t>{3, 2, 2}));
  EXPECT_EQ(r.next.num_nodes(), 7);
  for (const LayerCopy& c : r.copies) EXPECT_LE(c.from_node, 3) << "new nodes have no state";
  check_copies(fx, r, {});
}

// Added nodes would form more n_0-node pipelines than there are microbatches (B / b = 3
// here): Eq 2.6 cannot give each one, so Eq 2.5 re-instantiates all nodes instead.
TEST(OobleckReinstantiate, MorePipelinesThanMicrobatchesFallsBackToEq25) {
  Fixture fx = fixture(12, 1);
  fx.p.global_batch = 3;
  const Instantiation cur = by_hand(fx, {{0, 1}, {2, 3}});
  const Reinstantiation r = reinstantiate(fx.p, fx.ts, cur, {}, {4, 5, 6, 7, 8, 9});
  EXPECT_EQ(r.kind, ReconfigurationCase::kFull);
  EXPECT_EQ(r.next.num_nodes(), 10);
  EXPECT_LE(r.next.pipelines.size(), 3u);
  check_copies(fx, r, {});
}

TEST(OobleckReinstantiate, BelowFPlusOneN0StopsWithTheDocumentedMessage) {
  const Fixture fx = fixture(9, 1);
  const Instantiation cur = by_hand(fx, {{0, 1}, {2, 3}});
  try {
    reinstantiate(fx.p, fx.ts, cur, {3}, {});
    FAIL() << "expected InfeasibleError";
  } catch (const InfeasibleError& e) {
    EXPECT_NE(std::string(e.what()).find("N' = 3 nodes are fewer than (f+1) n_0 = (1+1) x 2 = 4"),
              std::string::npos)
        << e.what();
  }
}

TEST(OobleckReinstantiate, LostEveryReplicaOfALayerIsInfeasible) {
  const Fixture fx = fixture(6, 0);
  const Instantiation cur = by_hand(fx, {{0, 1}, {2, 3}});
  // Nodes 0 and 2 both hold the first stage: its layers have no surviving copy.
  EXPECT_THROW(reinstantiate(fx.p, fx.ts, cur, {0, 2}, {}), InfeasibleError);
}

TEST(OobleckReinstantiate, CopyTimeIsTheBusiestNic) {
  const std::vector<LayerCopy> copies{{0, 1, 2, 4e9}, {1, 1, 3, 2e9}, {2, 4, 3, 1e9}};
  // node 1 sends 6 GB; node 3 receives 3 GB: 6 GB / 2 GB/s + latency.
  EXPECT_DOUBLE_EQ(copy_time_s(copies, 2e9, 1e-5), 3.0 + 1e-5);
  EXPECT_DOUBLE_EQ(copy_time_s({}, 2e9, 1e-5), 0.0);
}

TEST(OobleckReinstantiate, Deterministic) {
  const Fixture fx = fixture(9, 1);
  const Instantiation cur = by_hand(fx, {{0, 1, 2}, {3, 4}, {5, 6}});
  const Reinstantiation a = reinstantiate(fx.p, fx.ts, cur, {4, 0}, {11});
  const Reinstantiation b = reinstantiate(fx.p, fx.ts, cur, {4, 0}, {11});
  ASSERT_EQ(a.copies.size(), b.copies.size());
  for (size_t i = 0; i < a.copies.size(); ++i) {
    EXPECT_EQ(a.copies[i].from_node, b.copies[i].from_node);
    EXPECT_EQ(a.copies[i].to_node, b.copies[i].to_node);
  }
  EXPECT_EQ(a.actions, b.actions);
}

}  // namespace
}  // namespace loom::oobleck
