#include "core/workload_cost.hpp"

#include <numeric>

#include "core/index.hpp"

namespace loom {
namespace {

/// The encoder a module belongs to: itself, or for a projector its first input's owner.
ModuleId component_owner(const Model& model, ModuleId module) {
  const Module& m = model.module(module);
  if (m.kind == ModuleKind::kProjector && !m.inputs.empty())
    return component_owner(model, model.inputs(module).front());
  return module;
}

double layer_workload(const Model& model, const CostModel& cost, int layer,
                      const std::vector<const Sample*>& samples, int tp) {
  const PassCost c = effective_cost(cost, model, layer, layer_shape(model, layer, samples), tp);
  return c.forward_s + c.backward_s();
}

}  // namespace

std::vector<Component> model_components(const Model& model) {
  std::vector<Component> components;
  PerModule<size_t> index_of(model.modules().ssize());
  for (const ModuleId m : model.modules().ids()) {
    const ModuleId owner = component_owner(model, m);
    if (owner == m) {  // owners come before the projectors that follow them
      index_of[owner] = components.size();
      components.push_back({.name = model.module(owner).name, .layers = {}});
    }
  }
  for (int l = 0; l < model.num_layers(); ++l) {
    const ModuleId owner = component_owner(model, model.module_of(l));
    components[index_of[owner]].layers.push_back(l);
  }
  return components;
}

std::vector<double> sample_component_workload(const Model& model, const CostModel& cost,
                                              const std::vector<Component>& components,
                                              const Sample& sample, int tp) {
  const std::vector<const Sample*> one = {&sample};
  std::vector<double> w;
  for (const Component& c : components) {
    double total = 0;
    for (int l : c.layers) total += layer_workload(model, cost, l, one, tp);
    w.push_back(total);
  }
  return w;
}

std::vector<double> microbatch_component_forward(const Model& model, const CostModel& cost,
                                                 const std::vector<Component>& components,
                                                 const std::vector<const Sample*>& samples,
                                                 int tp) {
  std::vector<double> f;
  for (const Component& c : components) {
    double total = 0;
    for (int l : c.layers)
      total += cost.layer_cost(l, layer_shape(model, l, samples), tp).forward_s;
    f.push_back(total);
  }
  return f;
}

std::vector<double> macroscopic_proportions(const Model& model, const CostModel& cost,
                                            const std::vector<Component>& components,
                                            const std::vector<Sample>& batch, int tp) {
  // One cost query per layer for the whole batch: a shape lists every sample as its own
  // sequence, so the quadratic attention term stays per sample (the sum of the per-sample
  // workloads, up to a per-invocation constant of `calibrated`).
  std::vector<const Sample*> all;
  for (const Sample& s : batch) all.push_back(&s);
  std::vector<double> sum(components.size(), 0.0);
  for (size_t i = 0; i < components.size(); ++i) {
    for (int l : components[i].layers) sum[i] += layer_workload(model, cost, l, all, tp);
  }
  const double total = std::accumulate(sum.begin(), sum.end(), 0.0);
  for (double& v : sum) v = total > 0 ? v / total : 1.0 / static_cast<double>(sum.size());
  return sum;
}

std::vector<double> macroscopic_layer_costs(const Model& model, const CostModel& cost,
                                            const std::vector<int>& layers,
                                            const std::vector<Sample>& batch, int microbatch_size,
                                            int tp) {
  std::vector<const Sample*> all;
  for (const Sample& s : batch) all.push_back(&s);
  const double scale =
      batch.empty() ? 0.0
                    : static_cast<double>(microbatch_size) / static_cast<double>(batch.size());
  std::vector<double> costs;
  for (int l : layers) costs.push_back(scale * layer_workload(model, cost, l, all, tp));
  return costs;
}

}  // namespace loom
