// What per-module layouts add to passes 4 and 6 (heterogeneous-parallelism-megatron §3):
// the context-parallel K/V exchange around each layer of a stage whose module has CP > 1,
// the colocated boundary transform between two modules sharing one rank set (§3.2,
// App. A.4), and the gradient reduction over the GPUs holding the same shard of a stage.
#include <algorithm>
#include <map>

#include "core/errors.hpp"
#include "core/index.hpp"
#include "schedulers/lowering/boundary.hpp"
#include "schedulers/lowering/module_shards.hpp"
#include "schedulers/lowering/passes.hpp"

namespace loom::lowering {
namespace {

/// The IR rank (any replica) placed on `gpu`.
RankId rank_on_gpu(const Schedule& schedule, int gpu) {
  for (const RankId r : schedule.rank_ids()) {
    if (schedule.ranks[r].gpu == gpu) return r;
  }
  throw std::logic_error("lowering: no rank on GPU " + std::to_string(gpu));
}

/// The collective group of `gpus` (ring order as given), one per distinct member list.
GroupId group_of_gpus(Schedule& schedule, const std::vector<int>& gpus) {
  std::vector<RankId> members;
  for (int gpu : gpus) members.push_back(rank_on_gpu(schedule, gpu));
  return group_id(schedule, members);
}

/// The stage that consumes the output of stage `s` (the stage of its last layer's first
/// consumer), none at the sink.
std::optional<StageId> consumer_stage(const Context& ctx, StageId s) {
  const int last = ctx.stage(s).segments.back().end - 1;
  const auto& consumers = ctx.graph.consumers(last);
  if (consumers.empty()) return std::nullopt;
  return ctx.stage_of(consumers.front());
}

}  // namespace

GroupId group_id(Schedule& schedule, const std::vector<RankId>& members) {
  for (const GroupId id : schedule.groups.ids()) {
    if (schedule.groups[id] == members) return id;
  }
  return schedule.add_group(members);
}

void add_kv_exchange(const Context& ctx, Schedule& schedule, std::vector<Op>& program, RankId rank,
                     const Compute& layer_op, double bytes) {
  const int layer = layer_op.first_layer;
  if (ctx.model.layer(layer).kind != LayerKind::kTransformer) return;
  if (layer_op.pass != Pass::kF && !ctx.graph.needs_backward(layer)) return;
  const ModuleLayout& layout = *ctx.stage(layer_op.stage).layout;
  const int gpu = schedule.ranks[rank].gpu;
  program.push_back(Collective{.kind = CollectiveKind::kAllGather,
                               .group = group_of_gpus(schedule, cp_ring(layout, gpu)),
                               .stage = layer_op.stage,
                               .module = layer_op.module,
                               .bytes = bytes});
}

void expand_boundary(const Context& ctx, Schedule& schedule, std::vector<Op>& program, RankId rank,
                     const RankAction& a) {
  const std::optional<StageId> consumer = consumer_stage(ctx, a.stage);
  if (!consumer) return;
  const StageId to = *consumer;
  const ModuleLayout& src = *ctx.stage(a.stage).layout;
  const ModuleLayout& dst = *ctx.stage(to).layout;
  if (!colocated(src, dst)) return;  // disjoint rank sets: leader messages only (pass 5)
  std::vector<SampleId> all;
  for (const SampleId id : IdRange<SampleId>(isize(ctx.problem.samples))) all.push_back(id);
  const int last = ctx.stage(a.stage).segments.back().end - 1;
  const double per_sample = boundary_bytes_per_sample(ctx.problem, last, all);
  const int gpu = schedule.ranks[rank].gpu;
  auto gather = [&](const std::vector<int>& gpus, double bytes) {
    program.push_back(Collective{.kind = CollectiveKind::kAllGather,
                                 .group = group_of_gpus(schedule, gpus),
                                 .stage = to,
                                 .module = ctx.stage(to).segments.front().module,
                                 .bytes = bytes});
  };
  if (dst.pp == 1) {
    // §3.2: fan-in all-gathers the source slices into each destination shard (forward),
    // fan-out into each source shard (backward); the rest is rank-local.
    const BoundaryPlan plan =
        plan_boundary(src, dst, static_cast<double>(all.size()), per_sample, "boundary");
    const BoundaryLeg& leg = a.pass == Pass::kF ? plan.forward : plan.backward;
    if (!leg.messages.empty())  // the scheduler rejects grids that do not nest
      throw std::logic_error("lowering: a colocated boundary needs slices from other GPUs");
    for (const BoundaryGroup& g : leg.allgathers) {
      if (g.gpus.size() >= 2 && std::find(g.gpus.begin(), g.gpus.end(), gpu) != g.gpus.end())
        gather(g.gpus, g.bytes);
    }
    return;
  }
  // A pipelined consumer: its first stage's TP x CP group all-gathers one microbatch's
  // shard from the pieces its GPUs received (pass 5 moved them there; the action runs in
  // the unit of that microbatch's forward, after its receives).
  const GridPosition at = grid_position(dst, gpu);
  if (a.pass != Pass::kF || at.stage != 0 || dst.tp * dst.cp < 2) return;
  const auto global = global_microbatches(ctx.problem, dst.dp);
  const double microbatch =
      static_cast<double>(global[whole_microbatch(a.microbatch, ctx.programs.batch.pieces)].size());
  gather(stage_group(dst, at.replica, 0), per_sample * microbatch / dst.dp);
}

void add_module_allreduce(const Context& ctx, Schedule& schedule,
                          const std::function<double(PipelineRank)>& extra_bytes) {
  const double grad_bytes = ctx.problem.memory.gradient_bytes_per_param;
  // Last stage first: the order gradients become final in (and Megatron reduces them).
  for (int index = ctx.num_stages() - 1; index >= 0; --index) {
    const StageId s{index};
    const StageSpec& spec = ctx.stage(s);
    const ModuleLayout& layout = *spec.layout;
    double bytes = extra_bytes(spec.copy_ranks.front());
    for (const Segment& seg : spec.segments) {
      for (int l = seg.first; l < seg.end; ++l) {
        if (!ctx.model.layer(l).frozen)
          bytes += ctx.problem.cost->parameters(l) / layout.tp * grad_bytes;
      }
    }
    if (bytes <= 0) continue;
    // One ring per TP shard: every copy, in every replica, whose GPU holds that shard.
    std::map<int, std::vector<RankId>> rings;
    const size_t copies = spec.copy_ranks.size();
    for (int d = 0; d < ctx.replicas; ++d) {
      for (size_t c = 0; c < copies; ++c) {
        const int gpu = spec.copy_gpu(d, c);
        rings[grid_position(layout, gpu).tp_rank].push_back(ctx.global_rank(d, spec.copy_ranks[c]));
      }
    }
    for (auto& [tp_rank, members] : rings) {
      std::sort(members.begin(), members.end());
      if (members.size() < 2) continue;
      const GroupId group = group_id(schedule, members);
      for (const RankId r : members) {
        schedule.programs[r].push_back(Collective{.kind = CollectiveKind::kAllReduce,
                                                  .group = group,
                                                  .stage = s,
                                                  .module = spec.segments.front().module,
                                                  .bytes = bytes});
      }
    }
  }
}

}  // namespace loom::lowering
