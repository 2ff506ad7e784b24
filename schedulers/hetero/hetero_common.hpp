#pragma once
/// What the two heterogeneous schedulers share (heterogeneous-parallelism-megatron §3):
/// module groups with their own layouts. The per-GPU cost of a module's shard is the
/// lowering's (lowering/module_shards.hpp).
#include <string>
#include <vector>

#include "core/index.hpp"
#include "core/layout.hpp"
#include "core/schedule.hpp"
#include "schedulers/lowering/module_shards.hpp"
#include "schedulers/scheduler.hpp"

namespace loom {

/// A module group of a per-module layout: an index into HeteroGroups::groups.
LOOM_DECLARE_ID(LayoutGroupId, PerLayoutGroup);

/// The module groups of a per-module layout (core/layout.hpp), the LLM group last.
struct HeteroGroups {
  PerLayoutGroup<LayoutGroup> groups;
  LayoutGroupId llm{0};                 ///< the LLM (sink) group
  std::vector<LayoutGroupId> encoders;  ///< the other groups, in model order
  /// Global layers of each group in model order (a group's modules may interleave with
  /// another group's in the model's topological order).
  PerLayoutGroup<std::vector<int>> layers;
  /// consumers[g]: groups fed by group g.
  PerLayoutGroup<std::vector<LayoutGroupId>> consumers;
};

/// Reads `problem.parallel.module_layouts`, or for a single-layout config derives them
/// with default_module_layouts (core/layout.hpp; colocated or not as `colocated_placement`).
/// Throws InputError naming the scheduler when the model has no single LLM.
HeteroGroups hetero_groups(const SchedulingProblem& problem, const std::string& scheduler,
                           bool colocated_placement);

/// What both per-module-layout schedulers start from: the problem and its layout groups.
class HeteroScheduler {
 protected:
  HeteroScheduler(const SchedulingProblem& p, const std::string& scheduler, bool colocated)
      : p_(p), model_(*p.model), h_(hetero_groups(p, scheduler, colocated)) {}
  const ModuleLayout& layout(LayoutGroupId group) const { return h_.groups[group].layout; }
  /// The config key of a group's layout, for errors.
  std::string key(LayoutGroupId group) const {
    return "parallel.modules." + model_.module(h_.groups[group].owner).name;
  }

  const SchedulingProblem& p_;
  const Model& model_;
  HeteroGroups h_;
};

/// GPU offsets of a colocated rank set in the LLM's grid (core/layout.hpp order: replica,
/// stage, then TP x CP shard): P stages of K shards per replica, Q = P K pieces.
class ColocatedGrid {
 public:
  ColocatedGrid() = default;
  explicit ColocatedGrid(const ModuleLayout& llm) : shards_(llm.tp * llm.cp), pp_(llm.pp) {}
  int pp() const { return pp_; }
  int shards() const { return shards_; }
  int pieces() const { return shards_ * pp_; }
  int replica(int r) const { return r / pieces(); }
  int stage(int r) const { return (r / shards_) % pp_; }
  int shard(int r) const { return r % shards_; }
  int gpu_of(int replica, int stage, int shard) const {
    return (replica * pp_ + stage) * shards_ + shard;
  }
  /// The i-th piece the LLM GPUs of shard k compute; the encoder on (stage i, shard k)
  /// computes this same piece.
  int piece_at(int shard, int i) const { return shard * pp_ + i; }

 private:
  int shards_ = 1, pp_ = 1;
};

}  // namespace loom
