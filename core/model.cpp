#include "core/model.hpp"

#include <algorithm>

#include "core/errors.hpp"

namespace loom {

const char* to_string(ModuleKind kind) {
  switch (kind) {
    case ModuleKind::kEncoder:
      return "encoder";
    case ModuleKind::kProjector:
      return "projector";
    case ModuleKind::kLlm:
      return "llm";
  }
  return "?";
}

const char* to_string(Recompute recompute) {
  switch (recompute) {
    case Recompute::kNone:
      return "none";
    case Recompute::kSelective:
      return "selective";
    case Recompute::kFull:
      return "full";
  }
  return "?";
}

const char* to_string(RecomputeModule module) {
  switch (module) {
    case RecomputeModule::kCoreAttention:
      return "core_attn";
    case RecomputeModule::kLayerNorm:
      return "layernorm";
    case RecomputeModule::kMoeActivation:
      return "moe_act";
    case RecomputeModule::kMlp:
      return "mlp";
    case RecomputeModule::kMlaUpProjection:
      return "mla_up_proj";
  }
  return "?";
}

std::map<std::string, std::string> module_recompute(const Model& model) {
  std::map<std::string, std::string> out;
  for (const Module& m : model.modules()) {
    if (!m.layers.empty() && m.layers.front().recompute)
      out[m.name] = to_string(*m.layers.front().recompute);
  }
  return out;
}

const char* to_string(LayerKind kind) {
  switch (kind) {
    case LayerKind::kTransformer:
      return "transformer";
    case LayerKind::kMlp:
      return "mlp";
  }
  return "?";
}

Model::Model(std::vector<Module> modules) : modules_(std::move(modules)) {
  if (modules_.empty()) throw InputError("model: at least one module is required");
  for (const ModuleId m : modules_.ids()) {
    const Module& mod = modules_[m];
    if (mod.layers.empty()) {
      throw InputError("model.modules." + mod.name + ": a module needs at least one layer");
    }
    for (ModuleId other{0}; other < m; ++other) {
      if (modules_[other].name == mod.name) {
        throw InputError("model.modules: duplicate module name '" + mod.name + "'");
      }
    }
    std::vector<ModuleId>& inputs = inputs_.emplace_back();
    for (const std::string& input : mod.inputs) {
      const std::optional<ModuleId> idx = module_index(input);
      if (!idx) {
        throw InputError("model.modules." + mod.name + ".inputs: unknown module '" + input + "'");
      }
      inputs.push_back(*idx);
      // Modules are listed in topological order, so an edge must point backwards.
      if (*idx >= m) {
        throw InputError("model.modules." + mod.name + ".inputs: '" + input +
                         "' must be listed before '" + mod.name +
                         "' (modules are given in "
                         "topological order)");
      }
    }
  }

  check_every_branch_reaches_the_sink();

  // Eq 3.3 across modalities: p(L) propagates forward along the DAG. Within a module,
  // p(L_l) = p(L_{l-1}) or not frozen(L_l); a module's first layer inherits the OR of the
  // last p of each input module.
  PerModule<bool> module_out_p(modules_.ssize(), false);
  for (const ModuleId m : modules_.ids()) {
    bool p = false;
    for (const ModuleId input : inputs_[m]) p = p || module_out_p[input];
    for (int l = 0; const LayerSpec& spec : modules_[m].layers) {
      input_needs_gradient_.push_back(p);  // p of everything upstream of this layer
      p = p || !spec.frozen;
      layers_.push_back({.module = m, .local_index = l++});
      trainable_upstream_.push_back(p);
    }
    module_out_p[m] = p;
  }
}

void Model::check_every_branch_reaches_the_sink() const {
  // The graph has one sink (the LLM): any other module nobody consumes (an encoder
  // feeding nothing) would be computed for no purpose, and no pipeline can place it.
  PerModule<bool> consumed(modules_.ssize(), false);
  for (const std::vector<ModuleId>& inputs : inputs_)
    for (const ModuleId input : inputs) consumed[input] = true;
  std::optional<ModuleId> sink;
  const ModuleId last{modules_.ssize() - 1};
  for (int k = modules_.ssize(); k-- > 0;) {
    const ModuleId m{k};
    if (consumed[m]) continue;
    const Module& mod = modules_[m];
    if (!sink && (mod.kind == ModuleKind::kLlm || m == last)) {
      sink = m;  // a model without an LLM ends at its last module
      continue;
    }
    throw InputError("model.modules." + mod.name + ": " + to_string(mod.kind) + " '" + mod.name +
                     "' feeds nothing (no module lists it in `inputs`); every encoder and "
                     "projector must lead to the LLM" +
                     (sink ? " '" + modules_[*sink].name + "'" : ""));
  }
}

std::optional<ModuleId> Model::module_index(const std::string& name) const {
  for (const ModuleId m : modules_.ids())
    if (modules_[m].name == name) return m;
  return std::nullopt;
}

const LayerSpec& Model::layer(int global_index) const {
  const LayerRef& ref = layer_ref(global_index);
  return modules_[ref.module].layers[static_cast<size_t>(ref.local_index)];
}

bool Model::any_trainable() const {
  return std::any_of(trainable_upstream_.begin(), trainable_upstream_.end(),
                     [](bool p) { return p; });
}

double LayerSpec::attended_pairs(double s) const {
  if (!causal) return s * s;
  const double w = sliding_window;
  return w > 0 && w < s ? w * s - 0.5 * w * w : 0.5 * s * s;
}

double layer_parameters(const LayerSpec& layer) {
  const double h = layer.hidden;
  const double f = layer.ffn;
  if (layer.kind == LayerKind::kMlp) return h * f + f * layer.out_hidden;
  double attention = 0;
  for (const AttentionProjection& p : attention_projections(layer)) attention += p.in * p.out;
  if (layer.attention_sinks) attention += layer.heads;
  if (layer.mtp) attention += 2.0 * h * h;  // M_k: the concatenation projected back to h
  const double matrices = layer.gated_mlp ? 3.0 : 2.0;
  if (!layer.moe()) return attention + matrices * h * f;
  const double expert = matrices * h * layer.expert_ffn;
  return attention + h * layer.experts /*router*/ + layer.shared_experts * expert +
         expert_parameters(layer);
}

std::vector<AttentionProjection> attention_projections(const LayerSpec& l) {
  const double h = l.hidden, heads = l.heads;
  using P = AttentionProjection;
  if (!l.mla()) {
    const double kv = static_cast<double>(l.head_size()) * l.kv_heads;
    return {{"qkv", h, l.query_width() + 2 * kv, P::kColumns, false},
            {"attention output", l.query_width(), h, P::kRows, false}};
  }
  std::vector<P> p;
  const double q = heads * l.score_head_dim();
  if (l.q_lora_rank > 0) {
    p.push_back({"q down", h, double(l.q_lora_rank), P::kNone, false});
    p.push_back({"q up", double(l.q_lora_rank), q, P::kColumns, true});
  } else {
    p.push_back({"q", h, q, P::kColumns, false});
  }
  p.push_back({"kv down", h, double(l.kv_lora_rank) + l.qk_rope_head_dim, P::kNone, false});
  p.push_back(
      {"kv up", double(l.kv_lora_rank), heads * (l.head_size() + l.v_head_dim), P::kColumns, true});
  p.push_back({"attention output", heads * l.v_head_dim, h, P::kRows, false});
  return p;
}

double rank_layer_parameters(const LayerSpec& layer, int ep) {
  return layer_parameters(layer) - expert_parameters(layer) * (1 - 1.0 / ep);
}

double expert_parameters(const LayerSpec& layer) {
  if (!layer.moe()) return 0;
  return layer.experts * (layer.gated_mlp ? 3.0 : 2.0) * layer.hidden * layer.expert_ffn;
}

}  // namespace loom
