// The per-module-layout costs of the lowering (module_shards.hpp): a module's work on one
// GPU of its own TP x CP x DP grid.
#include "schedulers/lowering/module_shards.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/errors.hpp"
#include "core/index.hpp"
#include "schedulers/lowering/context_parallel.hpp"
#include "schedulers/planners/cp/cp_plan.hpp"

namespace loom {
namespace {

/// Rank `cp_rank`'s share of a causal layer's attention work: per sequence, its share of
/// the key blocks under Megatron's zigzag split (cp_plan.hpp), weighted by s^2.
double causal_share(const MicrobatchShape& shape, int cp, int cp_rank) {
  std::map<int, double> share_of;  // sequence length -> rank's share
  double num = 0, den = 0;
  for (int s : shape.sequence_lengths) {
    auto it = share_of.find(s);
    if (it == share_of.end()) {
      MaskSpec spec;
      spec.kind = MaskKind::kCausal;
      spec.seq = s;
      CpPlanRequest request;
      request.cp = cp;
      request.distribution = CpDistribution::kZigzag;
      const CpPlan plan = plan_cp(generate_mask(spec), request);
      const double frac =
          plan.total_workload > 0
              ? static_cast<double>(plan.rank_workload[static_cast<size_t>(cp_rank)]) /
                    static_cast<double>(plan.total_workload)
              : 1.0 / cp;
      it = share_of.emplace(s, frac).first;
    }
    const double w = static_cast<double>(s) * s;
    num += w * it->second;
    den += w;
  }
  return den > 0 ? num / den : 1.0 / cp;
}

}  // namespace

std::vector<int> module_layers(const Model& model, ModuleId module) {
  std::vector<int> out;
  for (int l = 0; l < model.num_layers(); ++l) {
    if (model.module_of(l) == module) out.push_back(l);
  }
  return out;
}

PerMicrobatch<std::vector<SampleId>> global_microbatches(const SchedulingProblem& problem,
                                                         int llm_dp) {
  const int m = problem.schedule.microbatches;
  const int total = isize(problem.samples);
  if (m < 1 || total % m != 0 || total / m < 1) {
    throw InputError("schedule.microbatches: " + std::to_string(m) + " does not divide the " +
                     std::to_string(total) + " samples of the iteration");
  }
  const int per = total / m;
  if (per % llm_dp != 0) {
    throw InputError("schedule.microbatch_size: a microbatch of " + std::to_string(per) +
                     " sample(s) cannot be split over the LLM's dp = " + std::to_string(llm_dp) +
                     " replicas (make it a multiple of dp)");
  }
  PerMicrobatch<std::vector<SampleId>> out;
  for (int j = 0; j < m; ++j) {
    std::vector<SampleId>& samples = out.emplace_back();
    for (int k = 0; k < per; ++k) samples.push_back(SampleId{j * per + k});
  }
  return out;
}

std::vector<SampleId> replica_samples(const std::vector<SampleId>& microbatch, int replica,
                                      int dp) {
  const int per = isize(microbatch) / dp;
  return {microbatch.begin() + per * replica, microbatch.begin() + per * (replica + 1)};
}

ShardCost shard_cost(const SchedulingProblem& problem, ModuleId module, const ModuleLayout& layout,
                     const std::vector<SampleId>& microbatch, int replica, int cp_rank) {
  const Model& model = *problem.model;
  // The replica's batch interval: whole samples when they divide, else a 1/DP share of
  // the microbatch's items (equal-size items make the two agree).
  std::vector<SampleId> ids = microbatch;
  double scale = 1.0;
  if (isize(microbatch) % layout.dp == 0)
    ids = replica_samples(microbatch, replica, layout.dp);
  else
    scale = 1.0 / layout.dp;
  const std::vector<const Sample*> batch = sample_batch(problem.samples, ids);
  ShardCost out;
  for (int l : module_layers(model, module)) {
    const LayerSpec& spec = model.layer(l);
    const MicrobatchShape shape = layer_shape(model, l, batch);
    const PassCost full = effective_cost(*problem.cost, model, l, shape, layout.tp);
    double activation = problem.cost->activation_bytes(l, shape, layout.tp);
    PassCost shard = full;
    double kv = 0;
    if (layout.cp > 1 && !layout.cp_replicates) {
      const AttentionSplit split = split_attention(*problem.cost, model, l, shape, layout.tp);
      const double share = spec.causal ? causal_share(shape, layout.cp, cp_rank) : 1.0 / layout.cp;
      shard =
          scale_add(rank_linear_cost(*problem.cost, model, l, shape, layout.tp, layout.cp, split),
                    1.0, split.attention, share);
      activation /= layout.cp;
      if (spec.kind == LayerKind::kTransformer) {
        KvShape kvs;
        kvs.kv_heads = std::max(1, spec.kv_heads / layout.tp);
        kvs.head_dim = spec.heads > 0 ? spec.hidden / spec.heads : spec.hidden;
        kvs.dtype_bytes = spec.dtype_bytes;
        kv = shape.total_tokens() * kvs.bytes_per_token() * scale;
      }
    }
    out.layer.push_back(scale_add(shard, scale, shard, 0.0));
    out.activation.push_back(activation * scale);
    if (kv > out.kv_allgather_bytes) out.kv_allgather_bytes = kv;
  }
  return out;
}

GridPosition grid_position(const ModuleLayout& l, int gpu) {
  const int o = gpu - l.first_gpu;
  return {.replica = o / (l.pp * l.cp * l.tp),
          .stage = o / (l.cp * l.tp) % l.pp,
          .cp_rank = o / l.tp % l.cp,
          .tp_rank = o % l.tp};
}

std::vector<int> cp_ring(const ModuleLayout& l, int gpu) {
  const GridPosition at = grid_position(l, gpu);
  std::vector<int> ring;
  for (int q = 0; q < l.cp; ++q)
    ring.push_back(l.stage_gpu(at.replica, at.stage) + q * l.tp + at.tp_rank);
  return ring;
}

double boundary_bytes_per_sample(const SchedulingProblem& problem, int last_layer,
                                 const std::vector<SampleId>& microbatch) {
  const std::vector<const Sample*> batch = sample_batch(problem.samples, microbatch);
  const MicrobatchShape shape = layer_shape(*problem.model, last_layer, batch);
  return problem.cost->output_bytes(last_layer, shape) / static_cast<double>(batch.size());
}

}  // namespace loom
