// hetero-noncolocated (heterogeneous-parallelism-megatron §3.1, §3.3, Fig 4a, Fig 14,
// App. D): each encoder branch and the LLM on disjoint rank sets with their own TP/PP/DP,
// pipelined by graph-aware 1F1B; boundary tensors cross between the boundary leaders.
//
//   vision (DP 4, GPUs 4-7)          LLM (TP 2, PP 2, GPUs 0-3)
//   E0 E1 E2 E3 --leaders, one message per shard pair--> L0 (GPUs 0,1) -> L1 (GPUs 2,3)
//
// The scheduler decides the stages (each module group cut into its PP stages by Eq 3.5 on
// its own costs), where each data-parallel copy of a stage runs, and the graph-aware 1F1B
// order; the one lowering (lowering/lowering.hpp) does the rest. A rank is one pipeline
// stage of one replica of one module group: its TP group, as in the single-layout
// pipeline, so the rank is the boundary leader. Modules disagree on DP, so each
// microbatch is K batch pieces (K = the largest DP of any module): module replica d of
// DP_m computes pieces [d K/DP_m, (d+1) K/DP_m) one after another
// (BatchPieces, lowering/features.hpp), and a boundary sends exactly one message per overlapping
// (source shard, destination shard) pair per piece - the leader routes of §3.1.
//
// Limits (InputError naming the module): cp = 1 (context parallelism is simulated by
// hetero-colocated), data-parallel degrees that divide the largest one.
#include <algorithm>

#include "core/errors.hpp"
#include "core/index.hpp"
#include "schedulers/hetero/hetero_common.hpp"
#include "schedulers/hetero/hetero_order.hpp"
#include "schedulers/lowering/boundary.hpp"
#include "schedulers/lowering/stage_graph.hpp"
#include "schedulers/planners/partition/partition.hpp"

namespace loom {
namespace {

constexpr const char* kName = "hetero-noncolocated";

class NonColocated : HeteroScheduler {
 public:
  explicit NonColocated(const SchedulingProblem& p) : HeteroScheduler(p, kName, false) {}

  PipelinePrograms run() {
    check_layouts();
    partition();
    std::vector<StageGraphGroup> graph;  // group g is node g.value()
    for (const LayoutGroupId g : h_.groups.ids()) {
      StageGraphGroup& node =
          graph.emplace_back(StageGraphGroup{.pp = layout(g).pp, .consumers = {}});
      for (const LayoutGroupId v : h_.consumers[g]) node.consumers.push_back(v.value());
    }
    const auto orders = graph_aware_1f1b(graph, p_.schedule.microbatches);
    programs_.replicas.assign(1, RankOrders(programs_.ranks));
    for (const LayoutGroupId g : h_.groups.ids()) {
      const ModuleLayout& l = layout(g);
      for (int d = 0; d < l.dp; ++d) {
        for (int s = 0; s < l.pp; ++s) {
          auto& order = programs_.replicas.front()[rank_of(g, d, s)];
          for (const StageAction& a : orders[g.slot()][StageId{s}]) {
            for (int k = d * k_ / l.dp; k < (d + 1) * k_ / l.dp; ++k) {
              order.push_back({.stage = stage_base_[g] + s,
                               .pass = a.pass,
                               .microbatch = batch_piece(a.microbatch, k_, k)});
            }
          }
        }
      }
    }
    return std::move(programs_);
  }

 private:
  PipelineRank rank_of(LayoutGroupId g, int d, int s) const {
    return rank_base_[g] + (d * layout(g).pp + s);
  }

  void check_layouts() {
    for (const LayoutGroupId g : h_.groups.ids()) {
      if (layout(g).cp != 1) {
        throw InputError(key(g) +
                         ".cp: hetero-noncolocated models cp = 1 (context "
                         "parallelism is simulated by hetero-colocated), got " +
                         std::to_string(layout(g).cp));
      }
      k_ = std::max(k_, layout(g).dp);
    }
    for (const LayoutGroupId g : h_.groups.ids()) {
      for (const LayoutGroupId v : h_.consumers[g]) {
        if (colocated(layout(g), layout(v))) {
          throw InputError(key(g) + ": shares its rank set with '" +
                           model_.module(h_.groups[v].owner).name +
                           "'; hetero-noncolocated needs disjoint rank sets "
                           "(use hetero-colocated)");
        }
        boundary_kind(layout(g).dp, layout(v).dp, key(g));
      }
      if (k_ % layout(g).dp != 0) {
        throw InputError(key(g) + ".dp: " + std::to_string(layout(g).dp) +
                         " does not divide the largest dp of the model (" + std::to_string(k_) +
                         "): batch shards would not nest");
      }
    }
  }

  /// Each group's layers in PP stages by the min-bottleneck DP of Eq 3.5 on its own costs,
  /// one stage per (group, stage) with a copy per data-parallel replica of the group.
  void partition() {
    const auto microbatches = global_microbatches(p_, layout(h_.llm).dp);
    const std::vector<const Sample*> first = sample_batch(p_.samples, microbatches.front());
    programs_.batch.pieces = k_;
    for (const LayoutGroupId g : h_.groups.ids()) {
      const ModuleLayout& l = layout(g);
      rank_base_.push_back(PipelineRank{programs_.ranks});
      stage_base_.push_back(programs_.stages.next_id());
      programs_.ranks += l.dp * l.pp;
      const auto& layers = h_.layers[g];
      const PerLayer<double> all(
          layer_costs(model_, *p_.cost, p_.schedule.partition_view, first, l.tp));
      std::vector<double> costs;
      for (int layer : layers) costs.push_back(all[LayerId{layer}]);
      for (int s = 0; const StageRange& range : partition_min_bottleneck(costs, l.pp)) {
        StageSpec stage{.segments = segments_of(
                            model_, {layers.begin() + range.first, layers.begin() + range.end}),
                        .tp = l.tp,
                        .layout = l};
        for (int d = 0; d < l.dp; ++d) {
          stage.copy_ranks.push_back(rank_of(g, d, s));
          stage.gpu.push_back(l.stage_gpu(d, s));
        }
        programs_.stages.push_back(std::move(stage));
        ++s;
      }
    }
  }

  PipelinePrograms programs_{.stages = {}, .ranks = 0, .stage_rank = {}, .replicas = {}};
  int k_ = 1;
  PerLayoutGroup<PipelineRank> rank_base_;  ///< each group's first rank
  PerLayoutGroup<StageId> stage_base_;      ///< each group's first stage
};

}  // namespace

Schedule generate_hetero_noncolocated(const SchedulingProblem& problem) {
  return lower(problem, kName, NonColocated(problem).run());
}

}  // namespace loom
