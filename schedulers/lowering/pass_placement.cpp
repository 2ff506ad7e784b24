// Passes 1, 2, 6, 7 and 8: where ranks run, which samples each microbatch holds, the
// gradient reductions, the optimizer step and the static memory of every rank.
#include <algorithm>
#include <functional>

#include "core/errors.hpp"
#include "core/index.hpp"
#include "core/memory_model.hpp"
#include "core/placement.hpp"
#include "schedulers/lowering/gradient_buckets.hpp"
#include "schedulers/lowering/module_shards.hpp"
#include "schedulers/lowering/passes.hpp"
#include "schedulers/lowering/tied_embedding.hpp"

namespace loom::lowering {

Context::Context(const SchedulingProblem& p, const PipelinePrograms& progs, LoweringCosts c)
    : problem(p),
      model(*p.model),
      programs(progs),
      graph(*p.model,
            c == LoweringCosts::kNaive ? BackwardRule::kEveryLayer : BackwardRule::kFrozenAware),
      naive(c == LoweringCosts::kNaive),
      replicas(progs.sharded() ? progs.batch.module_replicas : p.parallel.dp),
      cp(progs.sharded() ? 1 : p.parallel.cp),
      ep(progs.sharded() ? 1 : p.parallel.ep),
      microbatches(p.schedule.microbatches * progs.batch.pieces),
      embeddings(tied_embeddings(p, progs)) {
  // No orders yet is allowed: a planner costs the stages before it orders them (dip).
  if (progs.ranks < 1 || (progs.replicas.size() > 1 && isize(progs.replicas) != replicas))
    throw std::logic_error("lowering: programs need one order set, or one per replica");
  for (const RankOrders& orders : progs.replicas) {
    if (orders.ssize() != progs.ranks)
      throw std::logic_error("lowering: rank orders do not match the ranks per replica");
  }
  std::vector<std::optional<StageId>> owner(model.layers().size());
  for (const StageId s : stage_ids()) {
    const PipelineRank r = programs.rank_of(s);
    const PipelineRank up = programs.up ? programs.up->stage_rank.at(s) : r;
    if (!programs.has_rank(r) || !programs.has_rank(up))
      throw std::logic_error("lowering: stage " + to_string(s) + " on no rank");
    for (const Segment& seg : stage(s).segments) {
      for (int l = seg.first; auto& at : layer_slice(owner, seg.first, seg.end)) {
        if (at)
          throw std::logic_error("stage graph: layer " + std::to_string(l) + " on two stages");
        at = s;
        ++l;
      }
    }
  }
  for (size_t l = 0; l < owner.size(); ++l) {
    if (!owner[l])
      throw std::logic_error("stage graph: layer " + std::to_string(l) + " on no stage");
    stage_of_layer.push_back(*owner[l]);
  }
  check_features();
  check_module_layouts();
}

/// The pairs of lowering features that cannot go together (features.hpp).
void Context::check_features() const {
  const PipelinePrograms& progs = programs;
  const bool pieces = progs.batch.pieces > 1 || progs.batch.module_replicas != 1;
  if (progs.batch.pieces < 1 || progs.batch.module_replicas < 1 || (pieces && !progs.sharded()))
    throw std::logic_error("lowering: batch pieces are for per-module layouts");
  if (progs.up && progs.sharded())
    throw std::logic_error("lowering: a second pipeline needs the single layout");
  for (const RankOrders& orders : progs.replicas) {
    for (const auto& order : orders) {
      for (const RankAction& a : order) {
        if ((a.kind == ActionKind::kBoundary && !progs.sharded()) ||
            (a.with_next == Join::kOverlap && progs.sharded()))
          throw std::logic_error(
              "lowering: boundary actions need per-module layouts, overlapped ones forbid them");
      }
    }
  }
}

void Context::check_module_layouts() const {
  const PipelinePrograms& progs = programs;
  if (!progs.sharded()) {
    for (const StageSpec& spec : progs.stages) {
      if (spec.layout || !spec.copy_ranks.empty())
        throw std::logic_error("lowering: every stage has a per-module layout, or none does");
    }
    return;
  }
  PerPipelineRank<char> placed(progs.ranks, false);
  for (const StageSpec& spec : progs.stages) {
    const int copies = isize(spec.copy_ranks);
    const bool copies_fit = spec.layout.has_value() && copies > 0 &&
                            isize(spec.gpu) == copies * replicas &&
                            progs.batch.pieces % copies == 0;
    if (!copies_fit)
      throw std::logic_error(
          "lowering: per-module layouts need every stage's layout, its copies' ranks, a GPU "
          "per copy and replica, and pieces a multiple of the copies");
    std::vector<PipelineRank> seen = spec.copy_ranks;
    std::sort(seen.begin(), seen.end());
    if (std::adjacent_find(seen.begin(), seen.end()) != seen.end() ||
        !placed.contains(seen.front()) || !placed.contains(seen.back()))
      throw std::logic_error("lowering: a stage's copies need distinct ranks of the replica");
    for (const PipelineRank r : seen) placed[r] = true;
  }
  if (std::find(placed.begin(), placed.end(), false) != placed.end())
    throw std::logic_error("lowering: a rank holds no copy of any stage");
  if (sink_layout().dp % replicas != 0)
    throw std::logic_error("lowering: module replicas must divide the LLM's data parallelism");
}

bool Context::needs_backward(const Segment& seg) const {
  for (int l = seg.first; l < seg.end; ++l) {
    if (graph.needs_backward(l)) return true;
  }
  return false;
}

namespace {
/// The first stage a rank of the replica holds (its chunk 0; the stage it holds a copy
/// of, with per-module data parallelism).
StageId first_stage_of(const Context& ctx, PipelineRank r) {
  for (const StageId s : ctx.stage_ids()) {
    if (ctx.programs.rank_of(s) == r) return s;
  }
  for (const StageId s : ctx.stage_ids()) {
    if (ctx.programs.holds(r, s)) return s;
  }
  throw std::logic_error("lowering: rank " + to_string(r) + " holds no stage");
}
}  // namespace

void place_ranks(const Context& ctx, Schedule& schedule) {
  const int ranks = ctx.programs.ranks;
  const int dp = ctx.replicas;
  const int tp = ctx.problem.parallel.tp;
  for (const Module& mod : ctx.model.modules()) schedule.module_names.push_back(mod.name);
  schedule.num_stages = ranks;
  schedule.microbatches = ctx.microbatches;
  schedule.cp = ctx.cp;
  schedule.programs.resize(ranks * ctx.lanes());
  if (ctx.programs.sharded()) {  // every copy of every stage on a rank of its own
    schedule.num_stages = ctx.num_stages();
    schedule.ranks.resize(ranks * dp);
    PerRank<char> placed(ranks * dp, false);
    for (const StageSpec& spec : ctx.programs.stages) {
      const size_t copies = spec.copy_ranks.size();
      for (int d = 0; d < dp; ++d) {
        for (size_t c = 0; c < copies; ++c) {
          const RankId r = ctx.global_rank(d, spec.copy_ranks[c]);
          const RankInfo info{.gpu = spec.copy_gpu(d, c),
                              .tp = ctx.stage_rank_width(spec),
                              .replica = ReplicaId{d}};
          if (placed[r] && !(schedule.ranks[r] == info))
            throw std::logic_error("lowering: rank " + to_string(r) +
                                   " holds copies placed on different GPUs");
          schedule.ranks[r] = info;
          placed[r] = true;
        }
      }
    }
    return;
  }
  if (!ctx.programs.stages.empty() && !ctx.programs.stages.front().gpu.empty()) {
    // Explicit placement; check_placement() vets it against the cluster.
    if (ctx.cp > 1)
      throw InputError("parallel.cp: " + schedule.scheduler +
                       " places its stages on GPUs of its own choosing, which leaves no room "
                       "for context-parallel ranks; remove parallel.cp or pick another scheduler");
    for (int d = 0; d < dp; ++d) {
      for (const PipelineRank r : IdRange<PipelineRank>(ranks)) {
        const StageId s = first_stage_of(ctx, r);
        schedule.ranks.push_back({.gpu = ctx.stage(s).gpu.at(static_cast<size_t>(d)),
                                  .tp = ctx.stage_tp(s),
                                  .replica = ReplicaId{d}});
      }
    }
    return;
  }
  const Cluster& c = *ctx.problem.cluster;
  if (tp > c.gpus_per_node || c.gpus_per_node % tp != 0) {
    throw InputError("parallel.tp: " + std::to_string(tp) + " must divide cluster.gpus_per_node (" +
                     std::to_string(c.gpus_per_node) +
                     "): a tensor-parallel group stays inside one node");
  }
  const int needed = ranks * dp * ctx.cp * tp;
  if (needed > c.num_gpus()) {
    const std::string cp = ctx.cp > 1 ? " x cp " + std::to_string(ctx.cp) : "";
    throw InfeasibleError("parallel: " + std::to_string(ranks) + " stages x dp " +
                          std::to_string(dp) + cp + " x tp " + std::to_string(tp) + " = " +
                          std::to_string(needed) + " GPUs, but the cluster has " +
                          std::to_string(c.num_gpus()) + " (" + std::to_string(c.nodes) +
                          " nodes x " + std::to_string(c.gpus_per_node) + ")");
  }
  // TP groups of consecutive GPUs, the other dimensions over them in parallel.order
  // (innermost first; Loom's default: replica, stage, CP rank, TP rank outermost to
  // innermost, so a CP ring of a small TP group stays inside a node).
  schedule.ranks.resize(ranks * ctx.lanes());
  for (int lane = 0; lane < ctx.lanes(); ++lane) {
    const int d = ctx.replica_of_lane(lane);
    for (const PipelineRank r : IdRange<PipelineRank>(ranks)) {
      const int gpu = placed_gpu(ctx.problem.parallel.order, {ctx.cp, dp, ranks},
                                 {lane % ctx.cp, d, r.value()}, tp);
      schedule.ranks[ctx.global_rank(lane, r)] = {.gpu = gpu, .tp = tp, .replica = ReplicaId{d}};
    }
  }
}

namespace {
/// Per-module layouts: the LLM's (the sink's) replicas split each microbatch in whole
/// samples, a block of them per IR replica, and each LLM replica lists its samples on its
/// pieces in turn, so every sample is in exactly one piece.
void assign_batch_pieces(const Context& ctx, Schedule& schedule) {
  const int pieces = ctx.programs.batch.pieces;
  const int dp = ctx.sink_layout().dp;
  const int per_replica = dp / ctx.replicas;  // LLM replicas in one IR replica
  const int per = pieces / per_replica;       // pieces per LLM replica
  const auto global = global_microbatches(ctx.problem, dp);
  schedule.samples.clear();
  for (int d = 0; d < ctx.replicas; ++d) {
    auto& samples = schedule.samples.emplace_back(ctx.microbatches);
    for (const MicrobatchId j : global.ids()) {
      for (int l = 0; l < per_replica; ++l) {
        for (int i = 0; const SampleId id : replica_samples(global[j], d * per_replica + l, dp)) {
          samples[batch_piece(j, pieces, l * per + i % per)].push_back(id);
          ++i;
        }
      }
    }
  }
}
}  // namespace

void assign_samples(const Context& ctx, Schedule& schedule) {
  const SchedulingProblem& p = ctx.problem;
  const int dp = ctx.replicas, m = ctx.microbatches;
  if (ctx.programs.sharded()) {
    if (!p.assignment.empty())
      throw std::logic_error("lowering: per-module layouts batch the samples themselves");
    assign_batch_pieces(ctx, schedule);
    return;
  }
  if (!p.assignment.empty()) {  // a scheduler's own batching (SchedulingProblem)
    if (isize(p.assignment) != dp || isize(p.assignment.front()) != m)
      throw std::logic_error("sample assignment does not match dp x microbatches");
    schedule.samples = p.assignment;
    return;
  }
  const int mbs = p.schedule.microbatch_size;
  const size_t needed = static_cast<size_t>(dp) * m * mbs;
  if (p.samples.size() < needed) {
    throw InputError("workload: the iteration needs dp x microbatches x microbatch_size = " +
                     std::to_string(needed) + " samples but the workload has " +
                     std::to_string(p.samples.size()));
  }
  schedule.samples.clear();
  for (int d = 0; d < dp; ++d) {
    PerMicrobatch<std::vector<SampleId>>& replica = schedule.samples.emplace_back();
    for (int j = 0; j < m; ++j) {
      std::vector<SampleId>& microbatch = replica.emplace_back();
      for (int k = 0; k < mbs; ++k) microbatch.push_back(SampleId{(d * m + j) * mbs + k});
    }
  }
}

namespace {
/// Trainable parameters of stage `s`; `label` becomes the stage and module of its last
/// trainable segment.
double trainable_parameters(const Context& ctx, StageId s, StageId* label_stage,
                            ModuleId* label_module) {
  double params = 0;
  for (const Segment& seg : ctx.stage(s).segments) {
    for (int l = seg.first; l < seg.end; ++l) {
      if (!ctx.model.layer(l).frozen) {
        params += data_parallel_parameters(ctx, l);
        *label_stage = s;
        *label_module = seg.module;
      }
    }
  }
  return params;
}

/// The rank of the replica that holds the other copy of rank r's stages (Chimera's
/// bidirectional pipelines: the up copy of its down stage); r itself with one pipeline.
PipelineRank copy_rank(const Context& ctx, PipelineRank r) {
  const PipelinePrograms& programs = ctx.programs;
  if (!programs.up) return r;
  const StageId first = first_stage_of(ctx, r);
  const PipelineRank other = programs.up->stage_rank[first];
  for (const StageId s : ctx.stage_ids()) {
    if (programs.holds(r, s) != programs.holds(other, s))
      throw std::logic_error("lowering: ranks " + to_string(r) + " and " + to_string(other) +
                             " hold the two copies of stage " + to_string(first) +
                             " but not the same stages");
  }
  return other;
}
/// A gradient all-reduce of `bytes` per member over a new group of `members`.
void add_allreduce(Schedule& schedule, const std::vector<RankId>& members, StageId label,
                   ModuleId module, double bytes, bool async) {
  const GroupId group = schedule.add_group(members);
  for (const RankId member : members) {
    schedule.programs[member].push_back(Collective{.kind = CollectiveKind::kAllReduce,
                                                   .group = group,
                                                   .stage = label,
                                                   .module = module,
                                                   .bytes = bytes,
                                                   .async = async});
  }
}

/// One all-reduce per rank over its trainable gradients (plus `extra_bytes(r)`, the
/// embedding copies' gradients) across the data-parallel replicas.
void add_data_parallel_allreduce(const Context& ctx, Schedule& schedule,
                                 const std::function<double(PipelineRank)>& extra_bytes) {
  const double grad_bytes = ctx.problem.memory.gradient_bytes_per_param;
  for (const PipelineRank r : ctx.programs.rank_ids()) {
    // One all-reduce per rank over the gradients of all its chunks, labelled with the
    // stage and module of the last trainable parameters it holds. With bidirectional
    // pipelines the two ranks holding copies of the same stages reduce together, once.
    const PipelineRank other = copy_rank(ctx, r);
    if (other < r) continue;
    const StageId first = first_stage_of(ctx, r);
    StageId label = first;
    ModuleId module = ctx.stage(first).segments.front().module;
    double bytes = 0;
    for (const StageId s : ctx.stage_ids()) {
      if (ctx.programs.holds(r, s))
        bytes += trainable_parameters(ctx, s, &label, &module) * grad_bytes / ctx.stage_tp(s);
    }
    bytes += extra_bytes(r);
    if (bytes <= 0) continue;
    std::vector<RankId> members;  // over dp x cp, as Megatron's data-parallel-with-CP group
    for (int lane = 0; lane < ctx.lanes(); ++lane) {
      members.push_back(ctx.global_rank(lane, r));
      if (other != r) members.push_back(ctx.global_rank(lane, other));
    }
    add_allreduce(schedule, members, label, module, bytes, false);
  }
}

/// The ranks of one replica that reduce a tied embedding together: all that hold either
/// stage, or under per-module layouts each copy of the embedding's stage with the same
/// copy of the LM head's (the same shard of the same module replica, as Megatron pairs
/// the first and last stage of each pipeline).
std::vector<std::vector<PipelineRank>> embedding_groups(const Context& ctx,
                                                        const TiedEmbedding& e) {
  if (!ctx.programs.sharded()) return {e.group};
  const auto& first = ctx.stage(e.first_stage).copy_ranks;
  const auto& last = ctx.stage(e.last_stage).copy_ranks;
  if (first.size() != last.size()) {
    const std::string name = ctx.model.module(e.module).name;
    throw InputError("model.modules." + name +
                     ".vocab: the tied embedding's stage and its LM head's stage have different "
                     "numbers of copies; leave vocab out or give '" +
                     name + "' one stage");
  }
  std::vector<std::vector<PipelineRank>> groups;
  for (size_t c = 0; c < first.size(); ++c) {
    std::vector<PipelineRank> pair{first[c], last[c]};
    std::sort(pair.begin(), pair.end());
    groups.push_back(pair);
  }
  return groups;
}

/// Megatron-LM's embedding all-reduce, per replica, after the data-parallel one.
void add_embedding_allreduce(const Context& ctx, Schedule& schedule,
                             const std::vector<TiedEmbedding>& embeddings) {
  const double grad_bytes = ctx.problem.memory.gradient_bytes_per_param;
  for (const TiedEmbedding& e : embeddings) {
    if (!e.trained) continue;
    for (int d = 0; d < ctx.lanes(); ++d) {  // each CP rank's copies, as each replica's
      for (const std::vector<PipelineRank>& ranks : embedding_groups(ctx, e)) {
        std::vector<RankId> members;
        for (const PipelineRank r : ranks) members.push_back(ctx.global_rank(d, r));
        const GroupId group = schedule.add_group(members);
        for (const PipelineRank r : ranks) {
          // Labelled with the stage of the embedding's copy this rank holds.
          const StageId stage = ctx.programs.holds(r, e.last_stage) ? e.last_stage : e.first_stage;
          schedule.programs[ctx.global_rank(d, r)].push_back(
              Collective{.kind = CollectiveKind::kAllReduce,
                         .group = group,
                         .stage = stage,
                         .module = e.module,
                         .bytes = e.parameters * grad_bytes / ctx.stage_tp(e.last_stage),
                         .tied_embedding = true,
                         // Behind the gradient buckets on the communication stream.
                         .async = overlaps_gradient_reduce(ctx)});
        }
      }
    }
  }
}
}  // namespace

double data_parallel_parameters(const Context& ctx, int layer) {
  const double all = ctx.problem.cost->parameters(layer);
  return ctx.ep > 1 ? all - expert_parameters(ctx.model.layer(layer)) : all;
}

void add_expert_gradient_allreduce(const Context& ctx, Schedule& schedule) {
  // Over the whole job's holders: with folding, the group's ring is its simulated members
  // times the fold (Schedule::ring_size).
  if (ctx.problem.expert_data_parallel() <= 1 && !ctx.programs.up) return;
  const double grad_bytes = ctx.problem.memory.gradient_bytes_per_param;
  for (const PipelineRank r : ctx.programs.rank_ids()) {
    // With bidirectional pipelines the two ranks holding copies of the same stages reduce
    // their experts together too, once.
    const PipelineRank other = copy_rank(ctx, r);
    if (other < r) continue;
    double bytes = 0;
    StageId label = first_stage_of(ctx, r);
    ModuleId module = ctx.stage(label).segments.front().module;
    for (const StageId s : ctx.stage_ids()) {
      if (!ctx.programs.holds(r, s)) continue;
      for (const Segment& seg : ctx.stage(s).segments) {
        for (int l = seg.first; l < seg.end; ++l) {
          if (ctx.model.layer(l).frozen || !ctx.model.layer(l).moe()) continue;
          bytes += rank_expert_parameters(ctx.model, l, ctx.problem.memory) * grad_bytes /
                   ctx.stage_tp(s);
          label = s;
          module = seg.module;
        }
      }
    }
    if (bytes <= 0) continue;
    // The ranks holding the same experts: one lane of every expert-parallel group.
    for (int e = 0; e < ctx.ep; ++e) {
      std::vector<RankId> members;
      for (int lane = e; lane < ctx.lanes(); lane += ctx.ep) {
        members.push_back(ctx.global_rank(lane, r));
        if (other != r) members.push_back(ctx.global_rank(lane, other));
      }
      add_allreduce(schedule, members, label, module, bytes, overlaps_gradient_reduce(ctx));
    }
  }
}

void add_gradient_allreduce(const Context& ctx, Schedule& schedule) {
  const int dp = ctx.lanes();
  const double grad_bytes = ctx.problem.memory.gradient_bytes_per_param;
  /// Gradient bytes per GPU of the embedding copies rank r keeps.
  auto copy_gradient_bytes = [&](PipelineRank r) {
    double bytes = 0;
    for (const TiedEmbedding& e : ctx.embeddings) {
      if (e.trained && e.keeps_copy(r))
        bytes += e.parameters * grad_bytes / ctx.stage_tp(e.last_stage);
    }
    return bytes;
  };
  if (ctx.problem.parallel.fsdp)
    ;  // the layers' reduce-scatters are pass 5b's
  else if (ctx.programs.sharded())
    add_module_allreduce(ctx, schedule, copy_gradient_bytes);
  else if (overlaps_gradient_reduce(ctx))
    add_gradient_buckets(ctx, schedule, copy_gradient_bytes);
  else if (dp > 1 || ctx.programs.up)
    add_data_parallel_allreduce(ctx, schedule, copy_gradient_bytes);
  // Under FSDP the experts' gradients reduce-scatter over their holders in pass 5b.
  if (ctx.ep > 1 && !ctx.problem.parallel.fsdp) add_expert_gradient_allreduce(ctx, schedule);
  add_embedding_allreduce(ctx, schedule, ctx.embeddings);
}

void add_optimizer_step(const Context& ctx, Schedule& schedule) {
  const MemoryConstants& memory = ctx.problem.memory;
  auto shards = [&](StageId s) {
    return memory.distributed_optimizer || memory.shard_parameters ? ctx.optimizer_shards(s) : 1;
  };
  for (const PipelineRank r : ctx.programs.rank_ids()) {
    double parameters = 0, bytes = 0;
    ModuleId module{0};
    for (const StageId s : ctx.stage_ids()) {
      if (!ctx.programs.holds(r, s)) continue;
      for (const Segment& seg : ctx.stage(s).segments) {
        for (int l = seg.first; l < seg.end; ++l) {
          const LayerSpec& layer = ctx.model.layer(l);
          if (layer.frozen) continue;
          // Sharded over dp x cp, a rank's 1/ep of the experts over dp x cp / ep: the same
          // share of every parameter.
          const double held =
              shards(s) > 1 ? ctx.problem.cost->parameters(l)
                            : rank_parameters(*ctx.problem.cost, ctx.model, l, ctx.problem.memory);
          const double p = held / ctx.stage_tp(s) / shards(s);
          parameters += p;
          bytes += optimizer_step_bytes(p, layer.dtype_bytes, memory);
          module = seg.module;
        }
      }
    }
    for (const TiedEmbedding& e : ctx.embeddings) {
      if (!e.trained || !e.keeps_copy(r)) continue;
      const double p = e.parameters / ctx.stage_tp(e.last_stage) / shards(e.last_stage);
      parameters += p;
      bytes += optimizer_step_bytes(p, ctx.model.layer(e.first_layer).dtype_bytes, memory);
    }
    const double seconds = parameters > 0 ? ctx.problem.cost->optimizer_step_seconds(bytes) : 0;
    if (seconds <= 0) continue;
    for (int d = 0; d < ctx.lanes(); ++d) {
      schedule.programs[ctx.global_rank(d, r)].push_back(
          OptimizerStep{.stage = first_stage_of(ctx, r),
                        .module = module,
                        .parameters = parameters,
                        .seconds = seconds});
    }
  }
}

void fill_static_memory(const Context& ctx, Schedule& schedule) {
  const auto per_rank = static_memory_per_rank(ctx.problem, ctx.programs);
  for (int d = 0; d < ctx.lanes(); ++d)
    for (const StaticMemory& memory : per_rank) schedule.static_memory.push_back(memory);
}

}  // namespace loom::lowering

namespace loom {

namespace {

/// FSDP's unsharded working set: while a layer computes, its rank holds that layer's whole
/// parameters and those of the next compute's layer, already prefetched (the same layer
/// again where the next microbatch or the backward comes next), and a layer's whole
/// gradient until its reduce-scatter has run. Counted as two copies of the rank's largest
/// layer and the gradient of its largest trainable one, for the whole iteration (a bound:
/// the peak lies at the largest layers).
/// With fsdp_reshard_after_forward = false a rank holds every layer it runs gathered, and
/// its gradients unsharded, for the whole step.
void add_unsharded_window(const SchedulingProblem& problem, const PipelinePrograms& programs,
                          PerPipelineRank<StaticMemory>& per_rank) {
  const Model& model = *problem.model;
  const bool per_step = !problem.parallel.fsdp_reshard_after_forward;
  const bool experts_sharded = problem.parallel.ep == 1 || problem.expert_data_parallel() > 1;
  struct Window {
    double parameters = 0, gradient = 0;
  };
  PerPipelineRank<Window> windows(programs.ranks);
  for (const StageId s : programs.stages.ids()) {
    const StageSpec& spec = programs.stages[s];
    const int tp = lowering::stage_tp(problem, spec);
    Window& w = windows[programs.rank_of(s)];
    for (const auto* segments :
         {&spec.segments, &spec.forward_copies.before, &spec.forward_copies.successor}) {
      for (const Segment& seg : *segments) {
        for (int l = seg.first; l < seg.end; ++l) {
          const double p = rank_parameters(*problem.cost, model, l, problem.memory) / tp;
          double weights = layer_weight_bytes(*problem.cost, model, l, tp, problem.memory);
          // Experts with one holder each stay whole (pass_fsdp.cpp): never gathered.
          if (!experts_sharded)
            weights -= rank_expert_parameters(model, l, problem.memory) / tp *
                       linear_weight_bytes_per_param(model.layer(l), problem.memory);
          const double gradient =
              model.layer(l).frozen ? 0 : p * problem.memory.gradient_bytes_per_param;
          if (per_step) {
            w.parameters += weights;
            w.gradient += gradient;
          } else {
            w.parameters = std::max(w.parameters, weights);
            w.gradient = std::max(w.gradient, gradient);
          }
        }
      }
    }
  }
  for (const PipelineRank r : programs.rank_ids()) {
    per_rank[r].parameters += (per_step ? 1 : 2) * windows[r].parameters;
    per_rank[r].gradients += windows[r].gradient;
  }
}

}  // namespace

PerPipelineRank<StaticMemory> static_memory_per_rank(const SchedulingProblem& problem,
                                                     const PipelinePrograms& programs) {
  using lowering::optimizer_shards;
  using lowering::stage_tp;
  const Model& model = *problem.model;
  PerPipelineRank<StaticMemory> per_rank(programs.ranks);
  for (const StageId s : programs.stages.ids()) {
    const StageSpec& spec = programs.stages[s];
    StaticMemory stage;
    auto add = [&](const Segment& seg, bool trained) {
      for (int l = seg.first; l < seg.end; ++l) {
        stage += layer_state_bytes(*problem.cost, model, l, stage_tp(problem, spec), problem.memory,
                                   optimizer_shards(problem, spec), trained);
      }
    };
    // A redundant copy holds the weights; only the real copy is trained. A successor copy
    // holds the whole model state, ready to train on a failover (Bamboo: "2x memory").
    for (const Segment& seg : spec.forward_copies.before) add(seg, false);
    for (const Segment& seg : spec.segments) add(seg, true);
    for (const Segment& seg : spec.forward_copies.successor) add(seg, true);
    // A rank holds every chunk placed on it.
    per_rank[programs.rank_of(s)] += stage;
    for (size_t c = 1; c < spec.copy_ranks.size(); ++c)  // per-module data parallelism
      per_rank[spec.copy_ranks[c]] += stage;
    if (programs.up) per_rank[programs.up->stage_rank[s]] += stage;  // the second copy
  }
  if (problem.parallel.fsdp) add_unsharded_window(problem, programs, per_rank);
  // The LM head's copy of a tied embedding (lowering/tied_embedding.hpp).
  for (const lowering::TiedEmbedding& e : lowering::tied_embeddings(problem, programs)) {
    const StageSpec& head = programs.stages[e.last_stage];
    for (const PipelineRank r : e.copy_ranks) {
      per_rank[r] += parameter_state_bytes(e.parameters / stage_tp(problem, head),
                                           model.layer(e.first_layer).dtype_bytes, problem.memory,
                                           optimizer_shards(problem, head), e.trained);
    }
  }
  return per_rank;
}

}  // namespace loom
