// Pass 5: point-to-point communication. Every data edge (core/dataflow.hpp) a compute
// reads from another rank becomes a Recv just before it, every edge it writes for another
// rank a Send just after it. The IR matches the k-th Send on a channel (ordered rank pair
// and layer edge) with the k-th Recv, so a receiver takes a channel's messages in the
// order the sender sent them: before a compute that needs message x it receives every
// message sent before x on that channel (a schedule whose ranks consume in another order
// than their producers send, like DIP's, stays matched). Actions joined to the next
// (RankAction::with_next: an overlapped F+B pair, a unit) take all their receives before
// them and make all their sends after them. Collectives pass 4 placed (per-module layouts) stay in
// place.
#include <algorithm>
#include <deque>
#include <future>
#include <map>
#include <set>
#include <span>
#include <tuple>

#include "core/errors.hpp"
#include "schedulers/lowering/passes.hpp"

namespace loom::lowering {
namespace {

/// (from rank, to rank, pass, producer layer, consumer layer) inside one replica.
using Channel = std::tuple<PipelineRank, PipelineRank, Pass, int, int>;

struct ChannelState {
  std::deque<MicrobatchId> pending;  ///< microbatches sent and not yet received, in send order
  std::set<MicrobatchId> received;
};

/// The rank (inside the replica) that holds the other end of `edge` for a compute on
/// `rank`: an input comes from the producer's (F) or the consumer's (B) rank; an output
/// goes to the consumer's (F) or the producer's (B) rank (for the edge's microbatch: with
/// bidirectional pipelines its direction decides).
StageId remote_stage(const Context& ctx, const DataEdge& edge, bool input) {
  const bool at_producer = (edge.pass == Pass::kF) == input;
  return ctx.stage_of(at_producer ? edge.producer : edge.boundary);
}
PipelineRank remote_rank(const Context& ctx, const DataEdge& edge, bool input) {
  return ctx.programs.rank_of(remote_stage(ctx, edge, input), edge.microbatch);
}

/// Per-module layouts (§3.1): a boundary tensor from another module group reaches the
/// receiving stage's leader, which broadcasts it to its TP peers over NVLink before the
/// compute can start (a pipelined broadcast: latency + bytes / bandwidth). Its time is on
/// the receiving rank, added to the compute that consumes the tensor.
double boundary_broadcast_s(const Context& ctx, StageId stage, StageId from_stage, double bytes) {
  const auto& layout = ctx.stage(stage).layout;
  if (!layout || ctx.stage_rank_width(ctx.stage(stage)) < 2 ||
      ctx.stage(from_stage).layout->owner == layout->owner)
    return 0;
  const LinkSpec& link = ctx.problem.cluster->intra_node;
  return link.latency + bytes / link.bandwidth;
}

Channel channel(PipelineRank from, PipelineRank to, const DataEdge& e) {
  return {from, to, e.pass, e.producer, e.boundary};
}

MessageTag tag_of(const DataEdge& e) {
  return {.pass = e.pass,
          .microbatch = e.microbatch,
          .boundary_layer = e.boundary,
          .producer_layer = e.producer};
}

/// An overlapped F+B pair runs as one fused computation (DualPipe's F&B chunk), and a
/// unit of actions as one step (Join, features.hpp): it receives what all of them
/// need before it starts and sends all their outputs when it ends. Reorders
/// program[start..) as receives, the rest (computes and their collectives), sends, each
/// kind in its order, so every channel keeps its send and receive order.
void group_unit(std::vector<Op>& program, size_t start) {
  const std::span<Op> ops = std::span(program).subspan(start);
  // The CP exchange inside a layer (MessageTag::context_parallel) stays between its parts.
  const auto computes = std::stable_partition(ops.begin(), ops.end(), [](const Op& op) {
    const auto* r = std::get_if<Recv>(&op);
    return r && !r->tag.context_parallel();
  });
  std::stable_partition(computes, ops.end(), [](const Op& op) {
    const auto* s = std::get_if<Send>(&op);
    return !s || s->tag.context_parallel();
  });
}

void lower_lane(const Context& ctx, Schedule& schedule, int lane) {
  const int ranks = ctx.programs.ranks;
  const int d = ctx.replica_of_lane(lane);
  auto global = [&](PipelineRank r) { return ctx.global_rank(lane, r); };
  // The send order of every channel: the senders' compute order.
  std::map<Channel, ChannelState> channels;
  for (const PipelineRank r : IdRange<PipelineRank>(ranks)) {
    for (const Op& op : schedule.programs[global(r)]) {
      const auto* c = std::get_if<Compute>(&op);
      if (!c || c->redundant || c->continues) continue;  // a layer's parts send at its last
      for (const DataEdge& e : op_outputs(ctx.graph, *c)) {
        const PipelineRank to = remote_rank(ctx, e, false);
        if (to != r) channels[channel(r, to, e)].pending.push_back(e.microbatch);
      }
    }
  }
  for (const PipelineRank r : IdRange<PipelineRank>(ranks)) {
    auto& program = schedule.programs[global(r)];
    std::vector<Op> computes = std::move(program);
    program.clear();
    const std::vector<bool>& joins = ctx.joins_next[global(r)];
    auto joined = [&](size_t i) { return i < joins.size() && joins[i]; };
    auto compute_at = [&](size_t i) { return std::get_if<Compute>(&computes[i]); };
    size_t unit_start = 0;  // where the current unit's ops begin (a pair's or a unit's)
    // Layer passes split into parts whose last part is still to come (pass, microbatch,
    // layer): the two halves of an overlapped pair may interleave their parts.
    std::set<std::tuple<Pass, MicrobatchId, int>> open_parts;
    for (size_t step = 0; step < computes.size(); ++step) {
      const bool continues_unit = step > 0 && joined(step - 1);
      if (!continues_unit && joined(step)) unit_start = program.size();
      const Compute* op = compute_at(step);
      if (!op) {  // a collective of pass 4 (per-module layouts), in place
        program.push_back(computes[step]);
        if (continues_unit && !joined(step)) group_unit(program, unit_start);
        continue;
      }
      const Compute& c = *op;
      double broadcast_s = 0;
      // A layer split into parts (context or expert parallelism) receives before its first.
      const auto part_of = std::make_tuple(c.pass, c.microbatch, c.first_layer);
      const bool receives = !c.redundant && !open_parts.count(part_of);
      if (c.continues)
        open_parts.insert(part_of);
      else
        open_parts.erase(part_of);
      if (receives) {
        for (const DataEdge& e : op_inputs(ctx.graph, c)) {
          const PipelineRank from = remote_rank(ctx, e, true);
          if (from == r) continue;
          broadcast_s += boundary_broadcast_s(ctx, c.stage, remote_stage(ctx, e, true),
                                              ctx.cost(d, e.microbatch).output_bytes(e.producer));
          ChannelState& ch = channels[channel(from, r, e)];
          if (ch.received.count(e.microbatch)) continue;  // taken earlier, in send order
          bool found = false;
          while (!found && !ch.pending.empty()) {
            const MicrobatchId k = ch.pending.front();
            ch.pending.pop_front();
            ch.received.insert(k);
            DataEdge sent = e;
            sent.microbatch = k;
            program.push_back(Recv{.peer = global(from),
                                   .stage = c.stage,
                                   .module = c.module,
                                   .tag = tag_of(sent),
                                   .bytes = ctx.cost(d, k).output_bytes(e.producer)});
            found = k == e.microbatch;
          }
          if (!found)
            throw InputError("rank " + to_string(global(r)) + " step " + std::to_string(step) +
                             " (" + to_string(computes[step], schedule) + ") needs " +
                             (e.pass == Pass::kF ? "the output" : "the gradient") + " of layer " +
                             std::to_string(e.pass == Pass::kF ? e.producer : e.boundary) +
                             " for microbatch " + to_string(e.microbatch) + " from rank " +
                             to_string(global(from)) + ", which never computes it");
        }
      }
      program.push_back(c);
      std::get<Compute>(program.back()).seconds += broadcast_s;
      const bool closes_unit = continues_unit && !joined(step);
      if (c.redundant || c.continues) {
        if (closes_unit) group_unit(program, unit_start);
        continue;
      }
      for (const DataEdge& e : op_outputs(ctx.graph, c)) {
        const PipelineRank to = remote_rank(ctx, e, false);
        if (to == r) continue;
        program.push_back(Send{.peer = global(to),
                               .stage = c.stage,
                               .module = c.module,
                               .tag = tag_of(e),
                               .bytes = ctx.cost(d, e.microbatch).output_bytes(e.producer)});
      }
      if (closes_unit) group_unit(program, unit_start);
    }
  }
}

}  // namespace

void add_point_to_point(const Context& ctx, Schedule& schedule) {
  // A lane writes only its own ranks' programs and reads the context: the second half of
  // the lanes on a second core (this pass is a fifth of planning 16,384 GPUs unfolded). An
  // error is the first lane's in order, as it was one after the other.
  const int lanes = ctx.lanes();
  const int half = lanes >= 64 ? lanes / 2 : lanes;
  auto second_half = std::async(half < lanes ? std::launch::async : std::launch::deferred, [&] {
    for (int lane = half; lane < lanes; ++lane) lower_lane(ctx, schedule, lane);
  });
  for (int lane = 0; lane < half; ++lane) lower_lane(ctx, schedule, lane);
  second_half.get();
}

}  // namespace loom::lowering
