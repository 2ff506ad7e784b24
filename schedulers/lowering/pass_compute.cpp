// Passes 3 and 4: the cost of every layer for every microbatch, and the compute
// operations each rank's actions expand into.
#include <algorithm>
#include <map>
#include <optional>
#include <tuple>

#include "core/errors.hpp"
#include "schedulers/lowering/module_shards.hpp"
#include "schedulers/lowering/passes.hpp"

namespace loom::lowering {

namespace {
/// Per-module layouts: a piece's work on a stage copy is its share (copies / pieces) of
/// the shard of the whole microbatch that the copy's GPU holds in its module's grid
/// (module_shards.hpp), and a piece's output is 1 / pieces of its IR replica's.
void cost_batch_pieces(Context& ctx) {
  const SchedulingProblem& p = ctx.problem;
  const int pieces = ctx.programs.batch.pieces;
  const auto global = global_microbatches(p, ctx.sink_layout().dp);
  // (module, microbatch, module replica, CP rank) -> the shard's costs
  std::map<std::tuple<ModuleId, MicrobatchId, int, int>, ShardCost> shards;
  const size_t layers = ctx.model.layers().size();
  for (int d = 0; d < ctx.replicas; ++d) {
    for (const MicrobatchId mb : ctx.microbatch_ids()) {
      const MicrobatchId j = whole_microbatch(mb, pieces);
      const std::vector<SampleId>& microbatch = global[j];
      const std::vector<const Sample*> batch =
          sample_batch(p.samples, replica_samples(microbatch, d, ctx.replicas));
      MicrobatchCosts& mc = ctx.cost(d, mb);
      mc.layer.resize(layers);
      mc.activation.resize(layers);
      mc.kv_allgather = PerLayer<double>(ctx.model.num_layers(), 0.0);
      for (int l = 0; l < ctx.model.num_layers(); ++l)
        mc.output.push_back(p.cost->output_bytes(l, layer_shape(ctx.model, l, batch)) / pieces);
      for (const StageId s : ctx.stage_ids()) {
        const StageSpec& spec = ctx.stage(s);
        const ModuleLayout& layout = *spec.layout;
        const GridPosition at =
            grid_position(layout, spec.copy_gpu(d, ctx.programs.copy_of(s, mb)));
        const double share = static_cast<double>(spec.copy_ranks.size()) / pieces;
        for (const Segment& seg : spec.segments) {
          const auto key = std::make_tuple(seg.module, j, at.replica, at.cp_rank);
          auto it = shards.find(key);
          if (it == shards.end()) {
            it = shards
                     .emplace(key,
                              shard_cost(p, seg.module, layout, microbatch, at.replica, at.cp_rank))
                     .first;
          }
          const ShardCost& sc = it->second;
          const auto refs = layer_slice(ctx.model.layers(), seg.first, seg.end);
          const auto layer = layer_slice(mc.layer, seg.first, seg.end);
          const auto activation = layer_slice(mc.activation, seg.first, seg.end);
          const auto kv_allgather = layer_slice(mc.kv_allgather, seg.first, seg.end);
          for (size_t i = 0; i < refs.size(); ++i) {
            const size_t local = static_cast<size_t>(refs[i].local_index);
            const PassCost& c = sc.layer[local];
            layer[i] = {c.forward_s * share, c.input_grad_s * share, c.weight_grad_s * share};
            activation[i] = sc.activation[local] * share;
            kv_allgather[i] = sc.kv_allgather_bytes * share;
          }
        }
      }
    }
  }
}
}  // namespace

void cost_microbatches(Context& ctx, const Schedule& schedule) {
  const SchedulingProblem& p = ctx.problem;
  if (ctx.programs.sharded() && ctx.naive)
    throw std::logic_error("lowering: no frozen-unaware view of per-module layouts");
  ctx.costs.resize(ctx.replicas, PerMicrobatch<MicrobatchCosts>(ctx.microbatches));
  if (ctx.programs.sharded()) {
    cost_batch_pieces(ctx);
    return;
  }
  for (int d = 0; d < ctx.replicas; ++d) {
    for (const MicrobatchId j : ctx.microbatch_ids()) {
      const std::vector<const Sample*> batch =
          sample_batch(p.samples, schedule.samples_of(ReplicaId{d}, j));
      MicrobatchCosts& mc = ctx.cost(d, j);
      if (ctx.ep > 1) cost_expert_parallel(ctx, batch, mc);
      if (ctx.cp > 1) {
        cost_context_parallel(ctx, batch, mc);
        if (ctx.naive) {  // as below: backward = 2 x forward
          for (PassCost& c : mc.layer) c.input_grad_s = c.weight_grad_s = c.forward_s;
        }
        continue;
      }
      for (int l = 0; l < ctx.model.num_layers(); ++l) {
        const MicrobatchShape shape = layer_shape(ctx.model, l, batch);
        const int tp = ctx.stage_tp(ctx.stage_of(l));
        PassCost c = effective_cost(*p.cost, ctx.model, l, shape, tp);
        if (ctx.naive) {  // §3.3.1: "backward passes take roughly twice as long as forward"
          c = p.cost->layer_cost(l, shape, tp);
          c.input_grad_s = c.weight_grad_s = c.forward_s;
        }
        mc.layer.push_back(c);
        mc.activation.push_back(p.cost->activation_bytes(l, shape, tp));
        mc.output.push_back(p.cost->output_bytes(l, shape));
      }
    }
  }
}

namespace {

/// The Compute of one segment of stage `s`, costs still zero.
Compute segment_op(Pass pass, StageId s, MicrobatchId mb, const Segment& seg) {
  return Compute{.pass = pass,
                 .stage = s,
                 .microbatch = mb,
                 .module = seg.module,
                 .first_layer = seg.first,
                 .end_layer = seg.end};
}

/// Where one action's ops go: the rank's program, and what per-module layouts need to
/// add collectives (the schedule's groups, the rank's GPU).
struct Target {
  Schedule& schedule;
  std::vector<Op>& program;
  RankId rank;
  int lane = 0;  ///< the replica x CP rank the program belongs to

  /// A layer run's compute: as it is, or its parts around the MoE all-to-alls (ep > 1)
  /// and the CP exchange (cp > 1).
  void push(const Context& ctx, const MicrobatchCosts& mc, const Compute& c) {
    auto push_layer = [&](const Compute& part) {
      if (mc.context_parallel.empty())
        program.push_back(part);
      else
        expand_context_parallel(ctx, schedule, program, lane, part,
                                mc.context_parallel[LayerId{part.first_layer}]);
    };
    const bool exchanges =
        !mc.expert_parallel.empty() && mc.expert_parallel[LayerId{c.first_layer}].exchanges() &&
        c.pass != Pass::kW && (c.pass == Pass::kF || ctx.graph.needs_backward(c.first_layer));
    const auto moe = [&]() -> const ExpertParallelLayer& {
      return mc.expert_parallel[LayerId{c.first_layer}];
    };
    if (exchanges)
      expand_expert_parallel(ctx, schedule, c, moe(), push_layer, program, lane);
    else if (!mc.expert_parallel.empty() && c.pass == Pass::kW)
      push_layer(scale_routed_weight_pass(ctx, c, moe(), lane));
    else
      push_layer(c);
  }
};

/// Whether a segment's module's CP ring exchanges K/V around every layer (per-module
/// layouts, cp > 1): its layers run one compute each, with the exchange beside each.
bool exchanges_kv(const Segment& seg, const MicrobatchCosts& mc) {
  return mc.kv_bytes(seg.first) > 0 && seg.end - seg.first > 1;
}

/// A segment's layers as computes: one, or one per layer where a collective goes with
/// every layer (the CP ring's K/V exchange; FSDP's parameter all-gather, pass_fsdp.cpp).
std::vector<Segment> layer_runs(const Context& ctx, const Segment& seg, const MicrobatchCosts& mc) {
  const bool per_layer = mc.kv_bytes(seg.first) > 0 || ctx.problem.parallel.fsdp ||
                         !mc.context_parallel.empty() || !mc.expert_parallel.empty();
  if (!per_layer) return {seg};
  std::vector<Segment> runs;
  for (int l = seg.first; l < seg.end; ++l) runs.push_back({seg.module, l, l + 1});
  return runs;
}

void expand_forward(const Context& ctx, Target& t, StageId s, const MicrobatchCosts& mc,
                    MicrobatchId mb) {
  std::vector<Op>& program = t.program;
  for (const Segment& seg : ctx.stage(s).forward_copies.before) {
    Compute c = segment_op(Pass::kF, s, mb, seg);
    c.redundant = true;
    for (const PassCost& pc : layer_slice(mc.layer, seg.first, seg.end)) c.seconds += pc.forward_s;
    program.push_back(c);
  }
  std::optional<size_t> last_kept;  // the stage's last forward whose activations stay
  for (const Segment& seg : ctx.stage(s).segments) {
    const bool kept = ctx.needs_backward(seg);
    const auto runs = layer_runs(ctx, seg, mc);
    for (const Segment& run : runs) {
      Compute c = segment_op(Pass::kF, s, mb, run);
      for (const PassCost& pc : layer_slice(mc.layer, run.first, run.end))
        c.seconds += pc.forward_s;
      if (kept) {
        for (const double bytes : layer_slice(mc.activation, run.first, run.end))
          c.activation_bytes += bytes;
      }
      if (exchanges_kv(seg, mc))
        add_kv_exchange(ctx, t.schedule, program, t.rank, c, mc.kv_bytes(run.first));
      t.push(ctx, mc, c);
      if (kept) last_kept = program.size() - 1;
    }
  }
  // Bamboo's FRC runs after the stage's own forward (the p2p pass puts the real output's
  // send before it). The copy's activations, where its layers need a backward, stay with
  // the stage's own until the stage's backward frees them (dissertation §2.7.1: Bamboo
  // holds "an additional copy of model states ... and activations"): they are counted on
  // the stage's last kept forward, whatever module the copy's layers belong to. A stage
  // with no backward of its own (a frozen encoder with nothing trainable upstream) has no
  // op that frees them, and counts none.
  for (const Segment& seg : ctx.stage(s).forward_copies.successor) {
    Compute c = segment_op(Pass::kF, s, mb, seg);
    c.redundant = true;
    for (const PassCost& pc : layer_slice(mc.layer, seg.first, seg.end)) c.seconds += pc.forward_s;
    double activation = 0;
    for (const double bytes : layer_slice(mc.activation, seg.first, seg.end)) activation += bytes;
    if (ctx.needs_backward(seg) && last_kept)
      std::get<Compute>(program[*last_kept]).activation_bytes += activation;
    program.push_back(c);
  }
}

/// B, I or W: the stage's segments in reverse.
void expand_backward(const Context& ctx, Target& t, StageId s, const MicrobatchCosts& mc, Pass pass,
                     MicrobatchId mb) {
  std::vector<Segment> segs = ctx.stage(s).segments;
  std::reverse(segs.begin(), segs.end());
  for (const Segment& seg : segs) {
    auto runs = layer_runs(ctx, seg, mc);
    std::reverse(runs.begin(), runs.end());
    for (const Segment& run : runs) {
      Compute c = segment_op(pass, s, mb, run);
      for (const PassCost& pc : layer_slice(mc.layer, run.first, run.end)) {
        if (pass != Pass::kW) c.seconds += pc.input_grad_s;
        if (pass != Pass::kI) {
          c.seconds += pc.weight_grad_s;
          c.weight_grad_s += pc.weight_grad_s;
        }
      }
      c.releases_activation = pass != Pass::kI && ctx.needs_backward(seg);
      t.push(ctx, mc, c);
      if (exchanges_kv(seg, mc))
        add_kv_exchange(ctx, t.schedule, t.program, t.rank, c, mc.kv_bytes(run.first));
    }
  }
}

/// An overlapped pair is an F joined to the next action, a full backward (B) of another
/// microbatch (Join::kOverlap, features.hpp).
template <class Where>
void check_overlap_pair(const std::vector<RankAction>& order, size_t step, const Where& where) {
  const RankAction& f = order[step];
  const bool paired =
      f.pass == Pass::kF && f.kind == ActionKind::kCompute && step + 1 < order.size() &&
      order[step + 1].pass == Pass::kB && order[step + 1].kind == ActionKind::kCompute &&
      order[step + 1].with_next == Join::kNone && order[step + 1].microbatch != f.microbatch;
  if (!paired)
    throw InputError(where() +
                     ": an overlapped action is a forward joined to the next action, a full "
                     "backward (B) of another microbatch that joins nothing");
}

}  // namespace

void expand_actions(Context& ctx, Schedule& schedule) {
  const int ranks = ctx.programs.ranks;
  ctx.joins_next = PerRank<std::vector<bool>>(schedule.num_ranks());
  for (int lane = 0; lane < ctx.lanes(); ++lane) {
    const int d = ctx.replica_of_lane(lane);
    const RankOrders& orders = ctx.programs.orders(d);
    for (const PipelineRank r : IdRange<PipelineRank>(ranks)) {
      const RankId global = ctx.global_rank(lane, r);
      auto& program = schedule.programs[global];
      Target target{schedule, program, global, lane};
      std::vector<bool>& joins = ctx.joins_next[global];
      const auto& order = orders[r];
      bool in_unit = false;   // the previous action runs in one unit with this one
      bool in_pair = false;   // ... as the forward half of an overlapped pair
      size_t pair_first = 0;  // where the pair's forward half begins in the program
      for (size_t step = 0; step < order.size(); ++step) {
        const RankAction& a = order[step];
        auto where = [&] {
          return "rank " + to_string(r) + " step " + std::to_string(step) + " (" +
                 to_string(a.stage) + to_string(a.pass) + to_string(a.microbatch) + ")";
        };
        if (a.microbatch < MicrobatchId{0} || a.microbatch >= MicrobatchId{ctx.microbatches})
          throw InputError(where() + ": microbatch out of range (schedule.microbatches = " +
                           std::to_string(ctx.microbatches) + ")");
        const bool on_rank =
            ctx.programs.stages.contains(a.stage) &&
            (a.kind == ActionKind::kBoundary ? ctx.programs.holds(r, a.stage)
                                             : ctx.programs.rank_of(a.stage, a.microbatch) == r);
        if (!on_rank)
          throw InputError(where() + ": stage " + to_string(a.stage) +
                           " is not on this rank (the schedule has " +
                           std::to_string(ctx.num_stages()) + " stages over " +
                           std::to_string(ranks) + " ranks)");
        if (a.with_next == Join::kOverlap) check_overlap_pair(order, step, where);
        const MicrobatchCosts& mc = ctx.cost(d, a.microbatch);
        const size_t first = program.size();
        if (a.kind == ActionKind::kBoundary)
          expand_boundary(ctx, schedule, program, global, a);
        else if (a.pass == Pass::kF)
          expand_forward(ctx, target, a.stage, mc, a.microbatch);
        else
          expand_backward(ctx, target, a.stage, mc, a.pass, a.microbatch);
        const bool overlapped = in_pair || a.with_next == Join::kOverlap;
        for (size_t k = first; k < program.size(); ++k) {
          if (auto* c = std::get_if<Compute>(&program[k])) c->overlapped = overlapped;
        }
        if (a.with_next == Join::kOverlap) pair_first = first;
        if (in_pair && ctx.ep > 1) {
          // Expert parallelism: the pair's halves hide each other's all-to-alls.
          const auto at = [&](size_t k) {
            return program.begin() + static_cast<std::ptrdiff_t>(k);
          };
          const std::vector<Op> forward(at(pair_first), at(first)),
              backward(at(first), program.end());
          program.erase(at(pair_first), program.end());
          for (Op& op : weave_overlapped_pair(
                   forward, backward, all_to_all_overlap_slowdown(ctx.problem.cluster->gpu)))
            program.push_back(std::move(op));
        }
        // Both kinds of join lower the same way: one step, receives first, sends last.
        const bool joins_next = a.with_next != Join::kNone;
        joins.resize(program.size(), false);
        if (in_unit || joins_next) {
          for (size_t k = first; k + 1 < program.size(); ++k) joins[k] = true;
          // The unit's last op so far (when this action emitted none and the unit began
          // earlier, the previous action's).
          if (!joins.empty() && (program.size() > first || in_unit)) joins.back() = joins_next;
        }
        in_unit = joins_next;
        in_pair = a.with_next == Join::kOverlap;
      }
    }
  }
}

}  // namespace loom::lowering
