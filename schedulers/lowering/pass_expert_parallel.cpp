// Expert parallelism in the single layout (expert_parallel.hpp): a rank's MoE layer costs
// (pass 3) and each MoE layer's pass cut around its dispatch and combine all-to-alls
// (pass 4).
#include <variant>

#include "schedulers/lowering/expert_parallel.hpp"
#include "schedulers/lowering/passes.hpp"

namespace loom {

double dispatch_bytes(const LayerSpec& layer, double tokens) {
  return layer.moe() ? tokens * layer.top_k * layer.hidden * layer.dtype_bytes : 0.0;
}

namespace lowering {
namespace {

/// The expert-parallel group of lane `lane`'s pipeline rank `rank`: the same rank of the
/// ep consecutive lanes its lane belongs to.
std::vector<RankId> ep_group(const Context& ctx, int lane, PipelineRank rank) {
  std::vector<RankId> group;
  const int first = lane / ctx.ep * ctx.ep;
  for (int e = 0; e < ctx.ep; ++e) group.push_back(ctx.global_rank(first + e, rank));
  return group;
}

}  // namespace

void cost_expert_parallel(const Context& ctx, const std::vector<const Sample*>& batch,
                          MicrobatchCosts& mc) {
  mc.expert_parallel.clear();
  for (int l = 0; l < ctx.model.num_layers(); ++l) {
    const LayerSpec& spec = ctx.model.layer(l);
    ExpertParallelLayer layer;
    if (spec.moe()) {
      // Under CP the rank's share of the tokens is 1/cp of the padded sequence: its experts'
      // phases are priced at that shape, as its other linears are (rank_linear_cost), or
      // as 1/cp of the microbatch's by a cost model fixed per microbatch.
      MicrobatchShape shape = layer_shape(ctx.model, l, batch);
      if (ctx.cp > 1) shape = pad_for_context_parallel(shape, ctx.cp);
      const int tp = ctx.stage_tp(ctx.stage_of(l));
      const bool per_rank = ctx.cp > 1 && ctx.problem.cost->prices_tokens();
      const MoePhases phases =
          ctx.problem.cost->moe_phases(l, per_rank ? cp_rank_shape(shape, ctx.cp) : shape, tp);
      const double share = per_rank ? 1.0 : 1.0 / ctx.cp;
      layer.phases = {scale_add(phases.experts, share, PassCost{}, 0.0),
                      scale_add(phases.combined, share, PassCost{}, 0.0)};
      // Per GPU: with tp > 1 (sequence parallel) each GPU of the rank dispatches its own
      // 1/tp of the tokens to the same GPU of its peers.
      layer.dispatch_bytes = dispatch_bytes(spec, shape.total_tokens() / ctx.cp / tp);
    }
    mc.expert_parallel.push_back(layer);
  }
}

const ExpertLoad* routed_load(const Context& ctx, const Compute& c, int lane) {
  const Module& module = ctx.model.module(c.module);
  const LayerSpec& spec = ctx.model.layer(c.first_layer);
  if (!spec.moe() || (module.routing.kind == RoutingKind::kBalanced && spec.capacity_factor <= 0))
    return nullptr;
  const int group = lane / ctx.ep;
  const auto key = std::make_tuple(c.first_layer, c.microbatch.value(), group);
  auto it = ctx.expert_loads.find(key);
  if (it == ctx.expert_loads.end()) {
    const int local = ctx.model.layer_ref(c.first_layer).local_index;
    it = ctx.expert_loads
             .emplace(key,
                      expert_load(module.routing, spec, local, c.microbatch.value(), group, ctx.ep))
             .first;
  }
  return &it->second;
}

Compute scale_routed_weight_pass(const Context& ctx, Compute c, const ExpertParallelLayer& layer,
                                 int lane) {
  const ExpertLoad* load = routed_load(ctx, c, lane);
  if (!load || c.weight_grad_s <= 0) return c;
  const double extra =
      layer.phases.experts.weight_grad_s * (load->member_factor(lane % ctx.ep) - 1);
  c.seconds = std::max(0.0, c.seconds + extra);
  c.weight_grad_s = std::max(0.0, c.weight_grad_s + extra);
  return c;
}

void expand_expert_parallel(const Context& ctx, Schedule& schedule, const Compute& c,
                            const ExpertParallelLayer& layer,
                            const std::function<void(const Compute&)>& push_outside,
                            std::vector<Op>& program, int lane) {
  const bool forward = c.pass == Pass::kF;
  // What of each phase this pass runs: F; I; or B = I + W (W of a trained layer only).
  auto seconds = [&](const PassCost& p) {
    if (forward) return p.forward_s;
    return p.input_grad_s + (c.pass == Pass::kB && c.weight_grad_s > 0 ? p.weight_grad_s : 0.0);
  };
  auto weight = [&](const PassCost& p) {
    return c.pass == Pass::kB && c.weight_grad_s > 0 ? p.weight_grad_s : 0.0;
  };
  auto part = [&](double s, double weight_grad) {
    Compute p = c;
    p.seconds = s;
    p.weight_grad_s = weight_grad;
    p.activation_bytes = 0;
    p.releases_activation = false;
    p.continues = true;
    return p;
  };
  const PipelineRank rank = ctx.programs.rank_of(c.stage, c.microbatch);
  const GroupId group = group_id(schedule, ep_group(ctx, lane, rank));
  // The router's loads (core/routing.hpp): this rank's experts compute its share of the
  // group's token copies, and every member's buffer is sized by the busiest receiver's.
  const ExpertLoad* load = routed_load(ctx, c, lane);
  const double expert_factor = load ? load->member_factor(lane % ctx.ep) : 1.0;
  const double bytes_factor = load ? load->busiest_factor() : 1.0;
  auto all_to_all = [&] {
    program.push_back(Collective{.kind = CollectiveKind::kAllToAll,
                                 .group = group,
                                 .stage = c.stage,
                                 .module = c.module,
                                 .bytes = layer.dispatch_bytes * bytes_factor,
                                 .first_layer = c.first_layer,  // whose tokens (executors)
                                 .end_layer = c.first_layer + 1});
  };
  const double experts = seconds(layer.phases.experts) * expert_factor;
  const double combined = seconds(layer.phases.combined);
  const double experts_w = weight(layer.phases.experts) * expert_factor;
  const double combined_w = weight(layer.phases.combined);
  // The layer's work less its balanced experts' and combine's, whatever the routing.
  Compute outside = c;
  outside.seconds = std::max(0.0, c.seconds - seconds(layer.phases.experts) - combined);
  outside.weight_grad_s =
      std::max(0.0, c.weight_grad_s - weight(layer.phases.experts) - combined_w);
  if (forward) {
    // Attention, router and permute; dispatch; experts; combine; unpermute and shared
    // experts, which end the layer (its activations kept, its output sent).
    outside.activation_bytes = 0;
    outside.continues = true;
    push_outside(outside);
    all_to_all();
    program.push_back(part(experts, 0));
    all_to_all();
    Compute last = c;
    last.seconds = combined;
    last.weight_grad_s = 0;
    program.push_back(last);
    return;
  }
  // The mirror image: the combine's gradient first, the dispatch's before the rest.
  program.push_back(part(combined, combined_w));
  all_to_all();
  program.push_back(part(experts, experts_w));
  all_to_all();
  push_outside(outside);
}

double all_to_all_overlap_slowdown(const GpuSpec& gpu) {
  // DeepSeek-V3 technical report (arXiv 2412.19437) §3.2.2: 20 of the H800's 132 SMs drive
  // the all-to-all that runs under the other chunk's compute.
  constexpr int kCommunicationSms = 20;
  return gpu.sms > kCommunicationSms ? double(gpu.sms) / (gpu.sms - kCommunicationSms) : 1.0;
}

std::vector<Op> weave_overlapped_pair(const std::vector<Op>& forward,
                                      const std::vector<Op>& backward, double slowdown) {
  const std::vector<Op>* stream[2] = {&forward, &backward};
  size_t next[2] = {0, 0};
  // The rank's async all-to-alls issued so far in this pair, and the count at which each
  // stream's latest one was issued (0: none in flight).
  int issued = 0;
  int waiting[2] = {0, 0};
  std::vector<Op> out;
  int turn = 0;
  while (next[0] < forward.size() || next[1] < backward.size()) {
    if (next[turn] >= stream[turn]->size()) turn = 1 - turn;
    const std::vector<Op>& ops = *stream[turn];
    // This stream's work up to its next all-to-all; under the other stream's all-to-all in
    // flight it gives that one its SMs.
    for (; next[turn] < ops.size() && !is_all_to_all(ops[next[turn]]); ++next[turn]) {
      Op op = ops[next[turn]];
      if (auto* c = std::get_if<Compute>(&op)) {
        if (waiting[turn] > 0) {  // the first compute after its own all-to-all needs it
          c->async_pending = issued - waiting[turn];
          waiting[turn] = 0;
        }
        if (waiting[1 - turn] > 0) {
          c->seconds *= slowdown;
          c->weight_grad_s *= slowdown;
        }
      }
      out.push_back(std::move(op));
    }
    if (next[turn] < ops.size()) {  // an all-to-all: issue it and run the other stream
      Collective a2a = std::get<Collective>(ops[next[turn]++]);
      a2a.async = true;
      out.push_back(a2a);
      waiting[turn] = ++issued;
    }
    turn = 1 - turn;
  }
  return out;
}

}  // namespace lowering
}  // namespace loom
