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
  for (size_t m = 0; m < modules_.size(); ++m) {
    const Module& mod = modules_[m];
    if (mod.layers.empty()) {
      throw InputError("model.modules." + mod.name + ": a module needs at least one layer");
    }
    for (size_t other = 0; other < m; ++other) {
      if (modules_[other].name == mod.name) {
        throw InputError("model.modules: duplicate module name '" + mod.name + "'");
      }
    }
    for (const std::string& input : mod.inputs) {
      int idx = module_index(input);
      if (idx < 0) {
        throw InputError("model.modules." + mod.name + ".inputs: unknown module '" + input + "'");
      }
      // Modules are listed in topological order, so an edge must point backwards.
      if (static_cast<size_t>(idx) >= m) {
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
  std::vector<bool> module_out_p(modules_.size(), false);
  for (size_t m = 0; m < modules_.size(); ++m) {
    bool p = false;
    for (const std::string& input : modules_[m].inputs) {
      p = p || module_out_p[static_cast<size_t>(module_index(input))];
    }
    for (size_t l = 0; l < modules_[m].layers.size(); ++l) {
      p = p || !modules_[m].layers[l].frozen;
      layers_.push_back({static_cast<int>(m), static_cast<int>(l)});
      trainable_upstream_.push_back(p);
    }
    module_out_p[m] = p;
  }
}

void Model::check_every_branch_reaches_the_sink() const {
  // The graph has one sink (the LLM): any other module nobody consumes (an encoder
  // feeding nothing) would be computed for no purpose, and no pipeline can place it.
  std::vector<bool> consumed(modules_.size(), false);
  for (const Module& mod : modules_) {
    for (const std::string& input : mod.inputs)
      consumed[static_cast<size_t>(module_index(input))] = true;
  }
  int sink = -1;
  for (size_t m = modules_.size(); m-- > 0;) {
    if (consumed[m]) continue;
    if (sink < 0 && modules_[m].kind == ModuleKind::kLlm) {
      sink = static_cast<int>(m);
      continue;
    }
    if (sink < 0 && m + 1 == modules_.size()) {
      sink = static_cast<int>(m);  // a model without an LLM ends at its last module
      continue;
    }
    const Module& mod = modules_[m];
    throw InputError("model.modules." + mod.name + ": " + to_string(mod.kind) + " '" + mod.name +
                     "' feeds nothing (no module lists it in `inputs`); every encoder and "
                     "projector must lead to the LLM" +
                     (sink >= 0 ? " '" + modules_[static_cast<size_t>(sink)].name + "'" : ""));
  }
}

int Model::module_index(const std::string& name) const {
  for (size_t i = 0; i < modules_.size(); ++i) {
    if (modules_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

const LayerSpec& Model::layer(int global_index) const {
  const LayerRef& ref = layers_.at(static_cast<size_t>(global_index));
  return modules_[static_cast<size_t>(ref.module)].layers[static_cast<size_t>(ref.local_index)];
}

bool Model::any_trainable() const {
  return std::any_of(trainable_upstream_.begin(), trainable_upstream_.end(),
                     [](bool p) { return p; });
}

double layer_parameters(const LayerSpec& layer) {
  const double h = layer.hidden;
  const double f = layer.ffn;
  if (layer.kind == LayerKind::kMlp) return h * f + f * layer.out_hidden;
  const double head_dim = layer.heads > 0 ? h / layer.heads : 0.0;
  const double kv_width = head_dim * layer.kv_heads;
  const double attention = h * h /*Q*/ + 2 * h * kv_width /*K,V*/ + h * h /*O*/;
  const double mlp = (layer.gated_mlp ? 3.0 : 2.0) * h * f;
  return attention + mlp;
}

}  // namespace loom
