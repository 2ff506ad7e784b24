#include "core/cost_analytical.hpp"

#include <algorithm>

#include "core/errors.hpp"
#include "core/index.hpp"
#include "core/model_flops.hpp"

namespace loom {

AnalyticalCostModel::AnalyticalCostModel(const Model& model, const Cluster& cluster,
                                         AnalyticalOptions options)
    : model_(model), cluster_(cluster), options_(options) {
  if (!(options.efficiency >= 0 && options.efficiency <= 1)) {
    throw InputError("cost.efficiency: must be in (0, 1], got " +
                     std::to_string(options.efficiency));
  }
  // Classes of layers that cost the same: equal shapes and the same embedding / LM-head role.
  std::vector<std::tuple<LayerSpec, int, int, Fp8Recipe>> classes;
  for (int l = 0; l < model.num_layers(); ++l) {
    const LayerKernelOptions o = kernel_options(l);
    // The class equal to this layer's (at most one: classes are distinct), or a new one.
    int id = 0;
    for (const auto& [spec, in, out, fp8] : classes) {
      if (spec == model.layer(l) && in == o.vocab_in && out == o.vocab_out && fp8 == o.fp8) break;
      ++id;
    }
    if (id == isize(classes)) classes.emplace_back(model.layer(l), o.vocab_in, o.vocab_out, o.fp8);
    layer_class_.push_back(id);
  }
}

AnalyticalCostModel::AnalyticalCostModel(const Model& model, const Cluster& cluster,
                                         double efficiency)
    : AnalyticalCostModel(model, cluster, AnalyticalOptions{.efficiency = efficiency}) {
  if (!(efficiency > 0 && efficiency <= 1)) {
    throw InputError("cost.efficiency: must be in (0, 1], got " + std::to_string(efficiency));
  }
}

LayerKernelOptions AnalyticalCostModel::kernel_options(int layer) const {
  LayerKernelOptions o;
  o.flash_attention = options_.flash_attention;
  o.sequence_parallel = options_.sequence_parallel;
  o.gradient_bytes = model_.layer(layer).frozen ? 0 : options_.gradient_bytes_per_param;
  o.gradient_accumulation_fusion = options_.gradient_accumulation_fusion;
  o.fp8 = options_.fp8;
  o.microbatches = options_.microbatches;
  o.expert_parallel = options_.expert_parallel;
  if (options_.tp_comm_overlap) o.tp_overlap = options_.tp_overlap;
  const LayerRef& ref = model_.layer_ref(layer);
  const Module& module = model_.module(ref.module);
  const int n = options_.fp8_bf16_layers;
  const int main_layers = isize(module.layers) - module.mtp_layers;
  if (module.kind == ModuleKind::kLlm &&
      (ref.local_index < n || ref.local_index >= main_layers - n))
    o.fp8 = Fp8Recipe::kOff;  // the language model's edge layers (and its MTP) stay in BF16
  if (model_.layer(layer).mtp) o.mtp_vocab = module.vocab;
  if (module.vocab > 0) {
    if (ref.local_index == 0) o.vocab_in = module.vocab;
    if (ref.local_index + 1 == isize(module.layers)) o.vocab_out = module.vocab;
  }
  return o;
}

std::vector<Kernel> AnalyticalCostModel::kernels(int layer, const MicrobatchShape& shape,
                                                 int tp) const {
  const LayerSpec& spec = model_.layer(layer);
  const GpuPerformance gpu(cluster_.gpu, spec.dtype_bytes);
  return layer_kernels(spec, shape, tp, gpu, cluster_.intra_node, kernel_options(layer));
}

PassCost AnalyticalCostModel::layer_cost(int layer, const MicrobatchShape& shape, int tp) const {
  if (!kernel_level()) return fixed_fraction_cost(layer, shape, tp);
  auto key = std::make_tuple(layer_class_[LayerId{layer}], tp, shape.sequence_lengths);
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  }
  const PassCost c = kernel_cost(layer, shape, tp);
  std::lock_guard<std::mutex> lock(cache_mutex_);
  cache_.emplace(std::move(key), c);
  return c;
}

PassCost AnalyticalCostModel::kernel_cost(int layer, const MicrobatchShape& shape, int tp) const {
  struct PassSum {
    double compute = 0;  ///< GEMMs and fused attention (what TP overlap hides behind)
    double memory = 0;
    double comm = 0;
    double total(bool overlap) const {
      return compute + memory + (overlap ? std::max(0.0, comm - compute) : comm);
    }
  };
  // `rerun`: the forward kernels selective recompute runs again before the backward, their
  // TP collectives hidden behind their GEMMs as in the forward.
  PassSum forward, input_grad, weight_grad, rerun;
  const auto add = [](PassSum& p, const Kernel& k) {
    (k.bound == KernelBound::kCompute  ? p.compute
     : k.bound == KernelBound::kMemory ? p.memory
                                       : p.comm) += k.seconds;
  };
  for (const Kernel& k : kernels(layer, shape, tp)) {
    add(k.pass == KernelPass::kForward     ? forward
        : k.pass == KernelPass::kInputGrad ? input_grad
                                           : weight_grad,
        k);
    if (recomputed(k, Recompute::kSelective, options_.recompute_modules)) add(rerun, k);
  }
  const bool overlap = options_.tp_comm_overlap;
  PassCost c;
  c.forward_s = forward.total(overlap);
  c.input_grad_s = input_grad.total(overlap);
  c.weight_grad_s = weight_grad.total(overlap);
  const Recompute recompute = recompute_of(layer);
  if (recompute == Recompute::kFull) c.input_grad_s += c.forward_s;
  if (recompute == Recompute::kSelective) c.input_grad_s += rerun.total(overlap);
  return c;
}

MoePhases AnalyticalCostModel::moe_phases(int layer, const MicrobatchShape& shape, int tp) const {
  MoePhases phases;
  if (!model_.layer(layer).moe() || !kernel_level()) return phases;
  const Recompute recompute = recompute_of(layer);
  for (const Kernel& k : kernels(layer, shape, tp)) {
    if (k.moe == MoePhase::kOutside || k.bound == KernelBound::kCommunication) continue;
    PassCost& c = k.moe == MoePhase::kExperts ? phases.experts : phases.combined;
    (k.pass == KernelPass::kForward     ? c.forward_s
     : k.pass == KernelPass::kInputGrad ? c.input_grad_s
                                        : c.weight_grad_s) += k.seconds;
    // A re-run forward kernel runs in its own phase, before that phase's backward.
    if (recompute == Recompute::kSelective && recomputed(k, recompute, options_.recompute_modules))
      c.input_grad_s += k.seconds;
  }
  return phases;
}

PassCost AnalyticalCostModel::fixed_fraction_cost(int layer, const MicrobatchShape& shape,
                                                  int tp) const {
  const LayerSpec& spec = model_.layer(layer);
  const double tokens = shape.total_tokens();
  // A token runs through top_k of the routed experts, not all of them.
  const double routed =
      expert_parameters(spec) * (spec.moe() ? 1.0 - double(spec.top_k) / spec.experts : 0.0);
  const double linear_flops = 2.0 * tokens * (layer_parameters(spec) - routed);
  double attention_flops = 0;
  if (spec.kind == LayerKind::kTransformer) {
    attention_flops = attention_core_flops(spec, shape);
  }
  const double rate = tp * cluster_.gpu.peak_flops * options_.efficiency;
  // Megatron-style TP: two all-reduces of the layer's activations per pass, on the raw
  // link bandwidth (what this mode has always assumed).
  double tp_comm = 0;
  if (spec.kind == LayerKind::kTransformer && tp > 1) {
    const double bytes = tokens * spec.hidden * spec.dtype_bytes;
    const LinkSpec& link = cluster_.intra_node;
    tp_comm = 2 * (2.0 * (tp - 1) / tp * bytes / link.bandwidth + 2.0 * (tp - 1) * link.latency);
  }
  PassCost c;
  c.forward_s = (linear_flops + attention_flops) / rate + tp_comm;
  c.input_grad_s = (linear_flops + 2 * attention_flops) / rate + tp_comm;
  c.weight_grad_s = linear_flops / rate;
  return c;
}

double AnalyticalCostModel::activation_bytes(int layer, const MicrobatchShape& shape,
                                             int tp) const {
  const LayerSpec& spec = model_.layer(layer);
  const double tokens = shape.total_tokens();
  if (!kernel_level()) {
    if (spec.kind == LayerKind::kMlp) return tokens * (spec.hidden + spec.ffn) * spec.dtype_bytes;
    return tokens * spec.hidden * (10.0 + 24.0 / tp) * spec.dtype_bytes / 2.0;
  }
  double bytes = 0;
  if (spec.kind == LayerKind::kMlp) {
    bytes = recompute_of(layer) == Recompute::kFull
                ? tokens * spec.hidden * spec.dtype_bytes
                : tokens * (spec.hidden + double(spec.ffn) / tp) * spec.dtype_bytes;
  } else {
    bytes = transformer_activation_bytes(
        spec, shape, tp, options_.flash_attention, options_.sequence_parallel, recompute_of(layer),
        kernel_options(layer).fp8 != Fp8Recipe::kOff, options_.recompute_modules);
  }
  // The LM head keeps its fp32 softmax for the cross-entropy's backward (a multi-token-
  // prediction layer its own).
  const LayerKernelOptions o = kernel_options(layer);
  bytes += tokens * double(o.vocab_out + o.mtp_vocab) / tp * 4;
  return bytes;
}

double AnalyticalCostModel::output_bytes(int layer, const MicrobatchShape& shape) const {
  const LayerSpec& spec = model_.layer(layer);
  const int width = spec.kind == LayerKind::kMlp ? spec.out_hidden : spec.hidden;
  return shape.total_tokens() * width * spec.dtype_bytes;
}

double AnalyticalCostModel::parameters(int layer) const {
  // The (tied) embedding counts once, with the first layer of its module.
  // An untied LM head's own weights count with the last layer, whose stage runs it.
  const LayerKernelOptions o = kernel_options(layer);
  const bool own_head =
      o.vocab_out > 0 && !model_.module(model_.layer_ref(layer).module).tie_embeddings;
  return layer_parameters(model_.layer(layer)) + embedding_parameters(layer) +
         (own_head ? double(o.vocab_out) * model_.layer(layer).hidden : 0.0);
}

double AnalyticalCostModel::optimizer_step_seconds(double bytes) const {
  return memory_bound_seconds(cluster_.gpu, bytes);
}

double AnalyticalCostModel::embedding_parameters(int layer) const {
  return double(kernel_options(layer).vocab_in) * model_.layer(layer).hidden;
}

nlohmann::json AnalyticalCostModel::describe() const {
  nlohmann::json j = {
      {"name", name()}, {"gpu", cluster_.gpu.name}, {"peak_flops", cluster_.gpu.peak_flops}};
  if (kernel_level()) {
    j["model"] = "kernel";
    j["attention"] = options_.flash_attention ? "flash" : "unfused";
    j["sequence_parallel"] = options_.sequence_parallel;
    j["tp_comm_overlap"] = options_.tp_comm_overlap;
    if (options_.tp_comm_overlap) j["tp_overlap"] = to_string(options_.tp_overlap);
    j["gradient_accumulation_fusion"] = options_.gradient_accumulation_fusion;
    j["recompute"] = to_string(options_.recompute);
    if (options_.recompute == Recompute::kSelective || !module_recompute(model_).empty()) {
      nlohmann::json modules = nlohmann::json::array();
      for (const RecomputeModule m : kRecomputeModules)
        if (options_.recompute_modules.has(m)) modules.push_back(to_string(m));
      j["recompute_modules"] = modules;
    }
    if (options_.fp8 != Fp8Recipe::kOff) j["fp8"] = to_string(options_.fp8);
    if (options_.fp8 != Fp8Recipe::kOff && options_.fp8_bf16_layers > 0)
      j["fp8_bf16_layers"] = options_.fp8_bf16_layers;
    if (auto modules = module_recompute(model_); !modules.empty()) j["module_recompute"] = modules;
  } else {
    j["efficiency"] = options_.efficiency;
  }
  return j;
}

}  // namespace loom
