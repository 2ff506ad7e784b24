// Context parallelism in the single layout (context_parallel.hpp): a CP rank's costs
// (pass 3) and each transformer layer's pass split around its K/V exchange (pass 4).
#include <algorithm>

#include "schedulers/lowering/passes.hpp"

namespace loom::lowering {
namespace {

/// The K/V of one CP rank's tokens for transformer layer `layer` on a TP group of `tp`.
double kv_block_bytes(const LayerSpec& layer, double tokens, int tp) {
  const double head_dim = layer.head_size();
  const double kv_heads = std::max(1.0, static_cast<double>(layer.kv_heads) / tp);
  return tokens * 2.0 * kv_heads * head_dim * layer.dtype_bytes;
}

/// The CP ring of lane `lane`'s rank `rank`: the same pipeline rank of every CP rank of
/// its replica, in CP order.
std::vector<RankId> cp_ring(const Context& ctx, int lane, PipelineRank rank) {
  std::vector<RankId> ring;
  const int first = ctx.replica_of_lane(lane) * ctx.cp;
  for (int c = 0; c < ctx.cp; ++c) ring.push_back(ctx.global_rank(first + c, rank));
  return ring;
}

}  // namespace

void cost_context_parallel(const Context& ctx, const std::vector<const Sample*>& batch,
                           MicrobatchCosts& mc) {
  const SchedulingProblem& p = ctx.problem;
  const double cp = ctx.cp;
  for (int l = 0; l < ctx.model.num_layers(); ++l) {
    const LayerSpec& spec = ctx.model.layer(l);
    const MicrobatchShape shape =
        pad_for_context_parallel(layer_shape(ctx.model, l, batch), ctx.cp);
    const int tp = ctx.stage_tp(ctx.stage_of(l));
    // Zigzag chunks give every CP rank 1/cp of the tokens and of the causal attention
    // (context_parallel.hpp); a bidirectional layer's blocks are all full, 1/cp too.
    const AttentionSplit split = split_attention(*p.cost, ctx.model, l, shape, tp);
    ContextParallelLayer layer;
    if (spec.kind == LayerKind::kTransformer) {
      layer.attention = scale_add(split.attention, 1.0 / cp, PassCost{}, 0.0);
      layer.before_attention = linear_share_before_attention(spec);
      layer.kv_block_bytes = kv_block_bytes(spec, shape.total_tokens() / cp, tp);
      layer.q_block_bytes = shape.total_tokens() / cp * spec.query_width() / tp * spec.dtype_bytes;
    }
    mc.layer.push_back(scale_add(rank_linear_cost(*p.cost, ctx.model, l, shape, tp, ctx.cp, split),
                                 1.0, split.attention, 1.0 / cp));
    mc.activation.push_back(p.cost->activation_bytes(l, shape, tp) / cp);
    mc.output.push_back(p.cost->output_bytes(l, shape) / cp);
    mc.context_parallel.push_back(layer);
  }
}

void expand_context_parallel(const Context& ctx, Schedule& schedule, std::vector<Op>& program,
                             int lane, const Compute& c, const ContextParallelLayer& layer) {
  const bool exchanges = layer.exchanges() && c.pass != Pass::kW &&
                         (c.pass == Pass::kF || ctx.graph.needs_backward(c.first_layer));
  if (!exchanges) {
    program.push_back(c);
    return;
  }
  const int cp = ctx.cp;
  // The rank that runs this microbatch's copy of the stage (a second pipeline's, Chimera).
  const PipelineRank rank = ctx.programs.rank_of(c.stage, c.microbatch);
  const std::vector<RankId> ring = cp_ring(ctx, lane, rank);
  const int me = lane % cp;
  const RankId next = ring[static_cast<size_t>((me + 1) % cp)];
  const RankId prev = ring[static_cast<size_t>((me + cp - 1) % cp)];
  const bool forward = c.pass == Pass::kF;
  // The attention core has no weights: all its backward is input gradient.
  const double attention = forward ? layer.attention.forward_s : layer.attention.input_grad_s;
  const double linear = c.seconds - attention;
  const double weight_grad = c.weight_grad_s;  // all in the linears
  // Forward: the Q, K, V projections come first; backward: the output projection and MLP.
  const double first_share = forward ? layer.before_attention : 1 - layer.before_attention;
  auto part = [&](double seconds, double weight_share) {
    Compute p = c;
    p.seconds = seconds;
    p.weight_grad_s = weight_grad * weight_share;
    p.activation_bytes = 0;
    p.releases_activation = false;
    p.continues = true;
    return p;
  };
  const MessageTag tag{.pass = forward ? Pass::kF : Pass::kB,
                       .microbatch = c.microbatch,
                       .boundary_layer = c.first_layer,
                       .producer_layer = c.first_layer};
  auto exchange = [&](double bytes) {
    program.push_back(
        Send{.peer = next, .stage = c.stage, .module = c.module, .tag = tag, .bytes = bytes});
  };
  auto take = [&](double bytes) {
    program.push_back(
        Recv{.peer = prev, .stage = c.stage, .module = c.module, .tag = tag, .bytes = bytes});
  };
  auto collective = [&](CollectiveKind kind, double bytes) {
    program.push_back(Collective{.kind = kind,
                                 .group = group_id(schedule, ring),
                                 .stage = c.stage,
                                 .module = c.module,
                                 .bytes = bytes,
                                 .first_layer = c.first_layer,  // whose K/V (executors)
                                 .end_layer = c.first_layer + 1});
  };
  const double block = layer.kv_block_bytes;
  program.push_back(part(linear * first_share, first_share));
  double attention_in_last = 0;  // forward: the last block (p2p) or all of it (all-gather)
  if (ctx.problem.parallel.cp_comm == CpComm::kP2p) {
    // Ring steps: send the block in hand, attend to it, take the previous rank's. Backward
    // passes K/V with the dK/dV accumulated so far.
    const double step_bytes = forward ? block : 2 * block;
    for (int step = 0; step + 1 < cp; ++step) {
      exchange(step_bytes);
      program.push_back(part(attention / cp, 0));
      take(step_bytes);
    }
    if (forward) {
      attention_in_last = attention / cp;
    } else {
      program.push_back(part(attention / cp, 0));
      exchange(block);  // dK/dV of the block in hand back to its owner
      take(block);
    }
  } else if (ctx.problem.parallel.cp_comm == CpComm::kAllGather) {
    collective(CollectiveKind::kAllGather, cp * block);
    if (forward) {
      attention_in_last = attention;
    } else {
      program.push_back(part(attention, 0));
      collective(CollectiveKind::kReduceScatter, cp * block);
    }
  } else {
    // Ulysses (Jacobs et al. 2023, DeepSpeed-Ulysses §3.1): the rank's Q, K, V rows
    // re-sharded to heads / cp of the whole sequence, attended, the output sent back; the
    // backward moves the output's gradient in and dQ, dK, dV out.
    const double qkv = layer.q_block_bytes + block, out = layer.q_block_bytes;
    collective(CollectiveKind::kAllToAll, forward ? qkv : out);
    program.push_back(part(attention, 0));
    collective(CollectiveKind::kAllToAll, forward ? out : qkv);
  }
  // The last part: the remaining attention (forward) and the other linears; it keeps the
  // layer's activations (forward) or frees them (backward), as the whole layer would.
  Compute last = c;
  last.seconds = linear * (1 - first_share) + attention_in_last;
  last.weight_grad_s = weight_grad * (1 - first_share);
  program.push_back(last);
}

}  // namespace loom::lowering
