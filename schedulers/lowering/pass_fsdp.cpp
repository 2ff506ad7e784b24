// Pass 5b, parallel.fsdp: fully sharded data parallelism as PyTorch FSDP2 runs it by default
// (Zhao et al., "PyTorch FSDP", VLDB'23 §3.2-3.3; ZeRO-3, Rajbhandari et al. SC'20 §5.3).
// Each rank keeps 1/N of every layer's state (N = the data-parallel replicas); a layer's
// parameters are all-gathered over the replicas before each forward and backward that uses
// them and freed after it (reshard_after_forward), and its gradients are reduce-scattered
// after each backward that produces them (gradients accumulate in the sharded form). The
// all-gather of the next layer is issued before the current layer runs (FSDP's forward and
// backward prefetch), on the rank's communication stream with the reduce-scatters, so
// communication hides behind compute where there is enough of it; each compute waits for
// its own layer's gather only (Compute::async_pending).
//
// With parallel.fsdp_reshard_after_forward = false (torchtitan's default under pipelining)
// a stage's layers are gathered once per step, before their first compute, held through
// every microbatch, and their gradients, accumulated unsharded, reduce-scattered once after
// their last backward: PyTorch pipelining's UNSHARD, RESHARD and REDUCE_GRAD per stage.
#include <functional>
#include <map>
#include <tuple>
#include <vector>

#include "core/errors.hpp"
#include "core/memory_model.hpp"
#include "schedulers/lowering/passes.hpp"

namespace loom::lowering {
namespace {

/// What FSDP shards apart: with expert parallelism a layer's routed experts over the lanes
/// holding the same experts (Megatron-Core's expert-data-parallel group), the rest over
/// every lane; without it, all of a layer over every lane.
enum class Part : std::uint8_t { kAll, kDense, kExperts };

/// Parameters of layer `l` in `part` that one rank holds (its 1/ep of the experts).
double part_parameters(const Context& ctx, int l, Part part) {
  const double all = rank_parameters(*ctx.problem.cost, ctx.model, l, ctx.problem.memory);
  if (part == Part::kAll) return all;
  const double experts = rank_expert_parameters(ctx.model, l, ctx.problem.memory);
  return part == Part::kExperts ? experts : all - experts;
}

/// Bytes of layer `l`'s weights in `part`, unsharded, per GPU of the TP group of `c`'s stage.
double layer_weight_bytes(const Context& ctx, const Compute& c, int l, Part part) {
  const int tp = ctx.stage_tp(c.stage);
  const double all =
      loom::layer_weight_bytes(*ctx.problem.cost, ctx.model, l, tp, ctx.problem.memory);
  if (part == Part::kAll) return all;
  const double experts = rank_expert_parameters(ctx.model, l, ctx.problem.memory) / tp *
                         linear_weight_bytes_per_param(ctx.model.layer(l), ctx.problem.memory);
  return part == Part::kExperts ? experts : all - experts;
}

/// Bytes of `part` of the parameters a compute reads, unsharded, per GPU of its TP group:
/// none for a weight-gradient pass (dW = dY^T X reads no weight) or for the backward of a
/// layer that needs none (a frozen layer with nothing trainable upstream: its B is a 0 s
/// placeholder).
double gathered_bytes(const Context& ctx, const Compute& c, Part part) {
  if (c.pass == Pass::kW) return 0;
  double bytes = 0;
  for (int l = c.first_layer; l < c.end_layer; ++l) {
    if (c.pass == Pass::kF || ctx.graph.needs_backward(l))
      bytes += layer_weight_bytes(ctx, c, l, part);
  }
  return bytes;
}

/// Gradient bytes of `part` a backward (B, or W when split) produces for the trainable
/// parameters of its layers, per GPU; 0 for other computes.
double gradient_bytes(const Context& ctx, const Compute& c, Part part) {
  // A layer split into parts (context or expert parallelism) has produced them with its
  // last part.
  if (c.redundant || c.continues || (c.pass != Pass::kB && c.pass != Pass::kW)) return 0;
  double bytes = 0;
  for (int l = c.first_layer; l < c.end_layer; ++l) {
    if (!ctx.model.layer(l).frozen)
      bytes += part_parameters(ctx, l, part) / ctx.stage_tp(c.stage) *
               ctx.problem.memory.gradient_bytes_per_param;
  }
  return bytes;
}

/// One sharding of a rank's layers: the group it gathers and reduce-scatters on.
struct Shard {
  GroupId group;
  Part part;
};

Collective fsdp_collective(CollectiveKind kind, GroupId group, const Compute& c, double bytes) {
  return Collective{.kind = kind,
                    .group = group,
                    .stage = c.stage,
                    .module = c.module,
                    .bytes = bytes,
                    .async = true,
                    .first_layer = c.first_layer,
                    .end_layer = c.end_layer};
}

/// FSDP's collectives woven into one rank's program: before each compute of `gathers`
/// (program indices, in order) an all-gather of `gather_bytes` of it per shard (the first
/// shard's always, the experts' where there are any), the next compute's prefetched
/// (issued before the current compute runs), each compute waiting for its own gathers only
/// (Compute::async_pending; the stream runs them in order); after compute i a
/// reduce-scatter per shard of `reduce_bytes(part, i, compute)` when that is > 0.
std::vector<Op> weave(
    const std::vector<Op>& program, const std::vector<Shard>& shards,
    const std::vector<std::size_t>& gathers,
    const std::function<double(Part, const Compute&)>& gather_bytes,
    const std::function<double(Part, std::size_t, const Compute&)>& reduce_bytes) {
  std::vector<Op> out;
  out.reserve(program.size() + 2 * shards.size() * gathers.size());
  int issued = 0;                                 // async collectives issued so far
  std::vector<int> issue_of(program.size(), -1);  // compute -> issue number of its last gather
  auto gather = [&](std::size_t i) {
    const auto& c = std::get<Compute>(program[i]);
    for (const Shard& shard : shards) {
      const double bytes = gather_bytes(shard.part, c);
      if (bytes <= 0 && &shard != &shards.front()) continue;
      out.push_back(fsdp_collective(CollectiveKind::kAllGather, shard.group, c, bytes));
      ++issued;
    }
    issue_of[i] = issued - 1;
  };
  std::size_t next = 0;  // the next entry of `gathers` not yet issued
  for (std::size_t i = 0; i < program.size(); ++i) {
    const auto* c = std::get_if<Compute>(&program[i]);
    if (!c) {
      out.push_back(program[i]);
      continue;
    }
    Compute compute = *c;
    if (next < gathers.size() && gathers[next] == i) gather(gathers[next++]);  // the first
    if (issue_of[i] >= 0) {
      if (next < gathers.size()) gather(gathers[next++]);  // prefetch the next one
      compute.async_pending = issued - issue_of[i] - 1;
    }
    out.push_back(compute);
    for (const Shard& shard : shards) {
      if (const double grads = reduce_bytes(shard.part, i, compute); grads > 0) {
        out.push_back(fsdp_collective(CollectiveKind::kReduceScatter, shard.group, compute, grads));
        ++issued;
      }
    }
  }
  return out;
}

/// One rank's program with its FSDP collectives per layer and microbatch: every compute
/// that reads weights gathers them; every backward reduce-scatters what it produced.
std::vector<Op> shard_program(const Context& ctx, const std::vector<Op>& program,
                              const std::vector<Shard>& shards) {
  std::vector<std::size_t> gathers;  // computes that need their parameters, in order
  bool after_part = false;           // a layer split into parts gathers before its first
  for (std::size_t i = 0; i < program.size(); ++i) {
    const auto* c = std::get_if<Compute>(&program[i]);
    if (!c) continue;
    if (!after_part && gathered_bytes(ctx, *c, Part::kAll) > 0) gathers.push_back(i);
    after_part = c->continues;
  }
  return weave(
      program, shards, gathers,
      [&](Part part, const Compute& c) { return gathered_bytes(ctx, c, part); },
      [&](Part part, std::size_t, const Compute& c) { return gradient_bytes(ctx, c, part); });
}

/// One rank's program with its FSDP collectives gathered once per step: per unit of layers
/// a compute runs (a stage's segment), one all-gather per shard of all its parameters
/// before its first compute (prefetched one unit ahead) and one reduce-scatter per shard
/// of all its gradients after its last backward.
std::vector<Op> shard_program_per_step(const Context& ctx, const std::vector<Op>& program,
                                       const std::vector<Shard>& shards) {
  using Unit = std::tuple<StageId, int, int>;  // stage, first and end layer
  auto unit_of = [](const Compute& c) { return Unit{c.stage, c.first_layer, c.end_layer}; };
  std::map<Unit, std::size_t> first, last_backward;
  std::vector<std::size_t> gathers;  // first computes of the units, in order
  for (std::size_t i = 0; i < program.size(); ++i) {
    const auto* c = std::get_if<Compute>(&program[i]);
    if (!c) continue;
    if (first.try_emplace(unit_of(*c), i).second) gathers.push_back(i);
    if (gradient_bytes(ctx, *c, Part::kAll) > 0) last_backward[unit_of(*c)] = i;
  }
  // The gather brings the unit's every layer for the whole step; the last backward's
  // reduce-scatter carries the gradients the step accumulated, the size one backward makes.
  auto unit_weights = [&](Part part, const Compute& c) {
    double bytes = 0;
    for (int l = c.first_layer; l < c.end_layer; ++l) bytes += layer_weight_bytes(ctx, c, l, part);
    return bytes;
  };
  return weave(
      program, shards, gathers, unit_weights, [&](Part part, std::size_t i, const Compute& c) {
        const auto last = last_backward.find(unit_of(c));
        return last != last_backward.end() && last->second == i ? gradient_bytes(ctx, c, part)
                                                                : 0.0;
      });
}

/// The FSDP collectives of a program, in order: what every replica must issue alike.
std::vector<std::tuple<CollectiveKind, int, int, double>> collectives_of(
    const std::vector<Op>& program) {
  std::vector<std::tuple<CollectiveKind, int, int, double>> out;
  for (const Op& op : program) {
    if (const auto* c = std::get_if<Collective>(&op); c && c->async)
      out.emplace_back(c->kind, c->first_layer, c->end_layer, c->bytes);
  }
  return out;
}

}  // namespace

void add_parameter_gathers(const Context& ctx, Schedule& schedule) {
  if (!ctx.problem.parallel.fsdp) return;
  if (ctx.programs.sharded() || ctx.programs.up)
    throw InputError("parallel.fsdp: " + schedule.scheduler +
                     " keeps several copies of a stage in one replica (per-module data "
                     "parallelism or a bidirectional pipeline), which FSDP does not shard; "
                     "remove parallel.fsdp or pick a one-copy scheduler (gpipe, 1f1b, ...)");
  for (const RankOrders& orders : ctx.programs.replicas) {
    for (const auto& order : orders) {
      for (const RankAction& a : order) {
        if (a.with_next == Join::kOverlap)
          throw InputError("parallel.fsdp: " + schedule.scheduler +
                           " fuses a forward and a backward into one overlapped action, which "
                           "FSDP's per-layer gathers would split; remove parallel.fsdp or pick "
                           "a scheduler without overlapped actions");
      }
    }
  }
  // Expert parallelism: the routed experts shard over the lanes holding the same ones (one
  // per expert-parallel group, the job's dp x cp / ep of them), the rest over every lane,
  // as Megatron-FSDP and torchtitan shard them; with one holder the experts stay whole.
  const bool experts_apart = ctx.ep > 1;
  const bool experts_sharded = experts_apart && ctx.problem.expert_data_parallel() > 1;
  for (const PipelineRank r : ctx.programs.rank_ids()) {
    std::vector<RankId> members;
    // Over dp x cp, as torchtitan's FSDP mesh (dp_shard x cp) shards.
    for (int d = 0; d < ctx.lanes(); ++d) members.push_back(ctx.global_rank(d, r));
    const GroupId group = group_id(schedule, members);
    std::vector<GroupId> expert_groups;  // per lane of an expert-parallel group
    for (int e = 0; experts_sharded && e < ctx.ep; ++e) {
      std::vector<RankId> holders;
      for (int d = e; d < ctx.lanes(); d += ctx.ep) holders.push_back(ctx.global_rank(d, r));
      expert_groups.push_back(group_id(schedule, holders));
    }
    const bool per_step = !ctx.problem.parallel.fsdp_reshard_after_forward;
    for (int d = 0; d < ctx.lanes(); ++d) {
      std::vector<Shard> shards = {{group, experts_apart ? Part::kDense : Part::kAll}};
      if (experts_sharded)
        shards.push_back({expert_groups[static_cast<size_t>(d % ctx.ep)], Part::kExperts});
      auto& program = schedule.programs[members[static_cast<size_t>(d)]];
      program = per_step ? shard_program_per_step(ctx, program, shards)
                         : shard_program(ctx, program, shards);
    }
    // FSDP runs the replicas in lockstep: each gathers and reduces the same layer at once.
    for (const RankId member : members) {
      if (collectives_of(schedule.programs[member]) !=
          collectives_of(schedule.programs[members[0]]))
        throw InputError("parallel.fsdp: " + schedule.scheduler + " gives replica " +
                         to_string(schedule.ranks[member].replica) +
                         " another order of layers or microbatches than replica 0 (on pipeline "
                         "rank " +
                         to_string(r) +
                         "), so FSDP's per-layer gathers would not "
                         "line up across the replicas; remove parallel.fsdp or pick a scheduler "
                         "that runs every replica alike");
    }
  }
}

}  // namespace loom::lowering
