#include "core/layout.hpp"

#include <algorithm>
#include <cctype>

#include "core/errors.hpp"
#include "core/index.hpp"

namespace loom {
namespace {

bool parse_int(const std::string& text, int* out) {
  if (text.empty() || text.size() > 9) return false;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  *out = std::stoi(text);
  return true;
}

std::string key(const Model& model, ModuleId module) {
  return "parallel.modules." + model.module(module).name;
}

std::string range_text(const ModuleLayout& l) {
  return "\"" + std::to_string(l.first_gpu) + "-" + std::to_string(l.end_gpu() - 1) + "\"";
}

/// The module whose table a module without one follows: a projector's first input.
ModuleId owner_of(const Model& model, ModuleId module,
                  const std::map<std::string, ModuleLayout>& explicit_layouts) {
  const Module& mod = model.module(module);
  if (explicit_layouts.count(mod.name)) return module;
  if (mod.kind == ModuleKind::kProjector && !mod.inputs.empty())
    return owner_of(model, model.inputs(module).front(), explicit_layouts);
  throw InputError(key(model, module) + ": missing; with per-module layouts every " +
                   std::string(to_string(mod.kind)) + " needs its own [parallel.modules." +
                   mod.name + "] table (only projectors follow their input module)");
}

void check_size(const Model& model, ModuleId module, const ModuleLayout& l, int layers) {
  if (l.size() != l.gpus) {
    throw InputError(key(model, module) + ": tp x cp x pp x dp = " + std::to_string(l.tp) + " x " +
                     std::to_string(l.cp) + " x " + std::to_string(l.pp) + " x " +
                     std::to_string(l.dp) + " = " + std::to_string(l.size()) +
                     " GPUs, but its rank set gpus = " + range_text(l) + " has " +
                     std::to_string(l.gpus));
  }
  if (l.pp > layers) {
    throw InputError(key(model, module) + ".pp: " + std::to_string(l.pp) +
                     " pipeline stages but the module (with the projectors that follow it) "
                     "has only " +
                     std::to_string(layers) + " layers");
  }
}

}  // namespace

bool parse_gpu_range(const std::string& text, int* first, int* end) {
  const auto dash = text.find('-');
  int a = 0, b = 0;
  if (dash == std::string::npos) {
    if (!parse_int(text, &a)) return false;
    b = a;
  } else if (!parse_int(text.substr(0, dash), &a) || !parse_int(text.substr(dash + 1), &b)) {
    return false;
  }
  if (b < a) return false;
  *first = a;
  *end = b + 1;
  return true;
}

PerModule<ModuleLayout> resolve_module_layouts(
    const Model& model, const std::map<std::string, ModuleLayout>& explicit_layouts,
    const Cluster& cluster) {
  if (explicit_layouts.empty()) return {};
  for (const auto& [name, layout] : explicit_layouts) {
    if (!model.module_index(name)) {
      std::string names;
      for (const Module& m : model.modules()) names += (names.empty() ? "" : ", ") + m.name;
      throw InputError("parallel.modules." + name + ": no module named '" + name +
                       "' (modules: " + names + ")");
    }
  }
  const int n = model.modules().ssize();
  PerModule<ModuleLayout> out(n);
  PerModule<int> group_layers(n, 0);
  for (const ModuleId m : out.ids()) {
    const ModuleId owner = owner_of(model, m, explicit_layouts);
    ModuleLayout l = explicit_layouts.at(model.module(owner).name);
    if (l.gpus == 0) l.gpus = l.size();
    l.owner = owner;
    out[m] = l;
    group_layers[owner] += isize(model.module(m).layers);
  }
  for (const ModuleId m : out.ids()) {
    const ModuleLayout& l = out[m];
    if (l.owner != m) continue;
    check_size(model, m, l, group_layers[m]);
    if (l.cp_replicates && model.module(m).kind != ModuleKind::kEncoder) {
      throw InputError(key(model, m) + ".cp_mode: \"replicate\" is for encoders (a copy of " +
                       "the encoder on every CP rank of the LLM's grid); a " +
                       to_string(model.module(m).kind) +
                       "'s CP splits its sequence: use cp_mode = \"split\"");
    }
    if (l.end_gpu() > cluster.num_gpus()) {
      throw InfeasibleError(key(model, m) + ": rank set gpus = " + range_text(l) + " needs GPU " +
                            std::to_string(l.end_gpu() - 1) + " but the cluster has " +
                            std::to_string(cluster.num_gpus()) + " GPUs (" +
                            std::to_string(cluster.nodes) + " nodes x " +
                            std::to_string(cluster.gpus_per_node) + ")");
    }
    for (ModuleId other{0}; other < m; ++other) {
      const ModuleLayout& o = out[other];
      if (o.owner != other || colocated(l, o)) continue;
      const bool disjoint = l.end_gpu() <= o.first_gpu || o.end_gpu() <= l.first_gpu;
      if (!disjoint) {
        throw InputError(key(model, m) + ": rank set gpus = " + range_text(l) +
                         " partly overlaps module '" + model.module(other).name +
                         "' (gpus = " + range_text(o) +
                         "); rank sets must be identical (colocated) or disjoint "
                         "(non-colocated)");
      }
    }
  }
  return out;
}

PerModule<ModuleLayout> default_module_layouts(const Model& model, int pp, int dp, int tp,
                                               bool colocated_placement, const Cluster& cluster) {
  auto layout = [](int tp_, int pp_, int dp_, int first_gpu, int gpus) {
    return ModuleLayout{.tp = tp_,
                        .cp = 1,
                        .pp = pp_,
                        .dp = dp_,
                        .first_gpu = first_gpu,
                        .gpus = gpus,
                        .owner = {}};
  };
  std::map<std::string, ModuleLayout> tables;
  std::vector<std::string> encoders;
  std::string llm;
  for (const Module& m : model.modules()) {
    if (m.kind == ModuleKind::kEncoder) encoders.push_back(m.name);
    if (m.kind == ModuleKind::kLlm) llm = m.name;
  }
  const int n_enc = isize(encoders);
  if (colocated_placement) {
    for (const std::string& e : encoders) tables[e] = layout(tp, 1, pp * dp, 0, 0);
    if (!llm.empty()) tables[llm] = layout(tp, pp, dp, 0, 0);
    return resolve_module_layouts(model, tables, cluster);
  }
  if (pp - n_enc < 1) {
    throw InputError("parallel.pp: " + std::to_string(pp) + " stages cannot give " +
                     std::to_string(n_enc) +
                     " encoder(s) a stage each and the LLM at least one (non-colocated "
                     "default layout; or give [parallel.modules] tables)");
  }
  int next = 0;
  for (const std::string& e : encoders) {
    tables[e] = layout(tp, 1, dp, next, tp * dp);
    next += tp * dp;
  }
  if (!llm.empty()) tables[llm] = layout(tp, pp - n_enc, dp, next, tp * (pp - n_enc) * dp);
  return resolve_module_layouts(model, tables, cluster);
}

std::vector<LayoutGroup> layout_groups(const Model& model, const PerModule<ModuleLayout>& layouts) {
  std::vector<LayoutGroup> groups;
  for (const ModuleId m : model.modules().ids()) {
    const ModuleLayout& l = layouts.at(m);
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const LayoutGroup& g) { return g.owner == l.owner; });
    if (it == groups.end()) {
      groups.push_back({l.owner, {m}, l});
    } else {
      it->modules.push_back(m);
    }
  }
  return groups;
}

}  // namespace loom
