// The model-FLOPs rule of core/model_flops.hpp, layer by layer and sequence by sequence
// (attention is quadratic in each sample's own length, so a batch of mixed lengths is not
// its mean length squared).
#include "core/model_flops.hpp"

#include <set>

namespace loom {

double attention_core_flops(const LayerSpec& layer, const MicrobatchShape& shape) {
  double pairs = 0;
  for (int s : shape.sequence_lengths) pairs += layer.attended_pairs(s);
  // Scores (QK^T) and context (AV) per head at their own widths.
  return 2 * pairs * layer.heads * (layer.score_head_dim() + layer.value_head_dim());
}

double layer_forward_flops(const Model& model, int global_layer, const MicrobatchShape& shape) {
  const LayerSpec& l = model.layer(global_layer);
  const double h = l.hidden;
  const double tokens = shape.total_tokens();
  double flops = 0;
  if (l.kind == LayerKind::kMlp) {
    flops = 2 * tokens * (h * l.ffn + static_cast<double>(l.ffn) * l.out_hidden);
  } else {
    double projections = 0;  // Q, K, V and O (MLA: through their latents)
    for (const AttentionProjection& p : attention_projections(l)) projections += p.in * p.out;
    // With experts: the top_k routed and the shared ones each token runs through; the
    // router counts nothing (Megatron-LM's count, which reproduces Megatron-Bridge's
    // published Qwen3 30B-A3B TFLOP/s: tests/core/moe_test.cpp).
    const double width = l.moe() ? double(l.top_k + l.shared_experts) * l.expert_ffn : l.ffn;
    const double mlp = (l.gated_mlp ? 3.0 : 2.0) * h * width;
    // Scores (QK^T) and context (AV) per head at their own widths.
    flops = 2 * tokens * (projections + mlp) + attention_core_flops(l, shape);
  }
  const ModuleId m = model.module_of(global_layer);
  const Module& module = model.module(m);
  const bool last_of_module = model.layer_ref(global_layer).local_index == isize(module.layers) - 1;
  if (module.vocab > 0 && last_of_module) flops += 2 * tokens * h * module.vocab;  // LM head
  // A multi-token-prediction layer's projection and its own pass through the LM head
  // (Megatron-LM counts both).
  if (l.mtp) flops += 2 * tokens * (2 * h * h + h * module.vocab);
  return flops;
}

int training_flops_multiplier(const Model& model, int global_layer) {
  if (!model.layer(global_layer).frozen) return 3;
  return model.has_trainable_upstream(global_layer) ? 2 : 1;
}

double compute_op_flops(const Schedule& schedule, const Model& model,
                        const std::vector<Sample>& samples, RankId rank, const Compute& op) {
  if (op.continues) return 0;
  const std::vector<const Sample*> batch =
      sample_batch(samples, schedule.samples_of(schedule.ranks[rank].replica, op.microbatch));
  double flops = 0;
  for (int l = op.first_layer; l < op.end_layer; ++l) {
    const int multiplier = training_flops_multiplier(model, l);
    int share = 1;  // kF
    if (op.pass == Pass::kB) share = multiplier - 1;
    if (op.pass == Pass::kI) share = multiplier >= 2 ? 1 : 0;
    if (op.pass == Pass::kW) share = multiplier == 3 ? 1 : 0;
    if (share > 0) flops += share * layer_forward_flops(model, l, layer_shape(model, l, batch));
  }
  return flops / (schedule.ranks[rank].tp * schedule.cp);
}

IterationWork iteration_work(const Schedule& schedule, const Model& model,
                             const std::vector<Sample>& samples) {
  IterationWork work;
  const ModuleId sink{isize(model.modules()) - 1};  // the DAG's one sink, the LLM
  for (const auto& replica : schedule.samples) {
    for (const auto& microbatch : replica) {
      const std::vector<const Sample*> batch = sample_batch(samples, microbatch);
      for (int l = 0; l < model.num_layers(); ++l) {
        work.model_flops += training_flops_multiplier(model, l) *
                            layer_forward_flops(model, l, layer_shape(model, l, batch));
      }
      for (const Sample* s : batch) work.tokens += module_input_tokens(model, sink, *s);
    }
  }
  work.model_flops *= schedule.replica_fold;  // the replicas folded away train too
  work.tokens *= schedule.replica_fold;
  return work;
}

TrainingRates training_rates(const Schedule& schedule, const IterationWork& work,
                             double iteration_time_s, double peak_flops) {
  TrainingRates r;
  std::set<int> gpus;  // a rank is a TP group (or one GPU): its GPUs [gpu, gpu + tp)
  for (const RankInfo& rank : schedule.ranks) {
    for (int g = rank.gpu; g < rank.gpu + rank.tp; ++g) gpus.insert(g);
  }
  r.gpus = isize(gpus) * schedule.replica_fold;
  r.model_flops = work.model_flops;
  if (iteration_time_s <= 0 || r.gpus == 0) return r;
  const double per_gpu_s = iteration_time_s * r.gpus;
  r.tflops_per_gpu = work.model_flops / per_gpu_s / 1e12;
  r.mfu = peak_flops > 0 ? work.model_flops / per_gpu_s / peak_flops : 0;
  r.tokens_per_s_per_gpu = work.tokens / per_gpu_s;
  return r;
}

}  // namespace loom
