// Dissertation §4.4.3, Algorithm 3: heterogeneous model-parallel configuration search.
// Tier 1 balances each component's stages with the 1D DP of Eq 4.1 (the recurrence of
// Eq 3.5 on the component's own layers); tier 2 rates the combination with Eq 4.2 plus a
// resharding cost at component boundaries whose TP degrees differ.
#include <algorithm>
#include <functional>

#include "core/errors.hpp"
#include "core/index.hpp"
#include "core/memory_model.hpp"
#include "schedulers/planners/layout/entrain_planner.hpp"

namespace loom {
namespace {

/// A layer of one component, by its index into the component's own layers (what a
/// StageRange counts), not the model's layer number.
LOOM_DECLARE_ID(ComponentLayer, PerComponentLayer);

struct Candidate {
  int tp = 1;
  ComponentConfig config;
  std::vector<double> activation;    ///< per stage, one microbatch, per GPU
  std::vector<double> static_bytes;  ///< per stage: model state per GPU (memory_model.hpp)
};

/// One component on `gpus` GPUs at `tp`: Eq 4.1 partition, stage latencies and memory.
Candidate balance_component(const PlannerInputs& in, const Component& c,
                            const std::vector<Sample>& batch, int gpus, int tp) {
  Candidate cand;
  cand.tp = tp;
  ComponentConfig& cc = cand.config;
  cc.name = c.name;
  cc.gpus = gpus;
  cc.tp = tp;
  cc.pp = gpus / tp;
  const std::vector<double> costs =
      macroscopic_layer_costs(*in.model, *in.cost, c.layers, batch, in.microbatch_size, tp);
  cc.stages = partition_min_bottleneck(costs, cc.pp);
  const PerComponentLayer<int> model_layer(c.layers);
  const PerComponentLayer<double> layer_cost(costs);
  std::vector<const Sample*> all;
  for (const Sample& s : batch) all.push_back(&s);
  const double scale = static_cast<double>(in.microbatch_size) / static_cast<double>(batch.size());
  for (const StageRange& r : cc.stages) {
    double tau = 0, act = 0, stat = 0;
    for (ComponentLayer j{r.first}; j < ComponentLayer{r.end}; ++j) {
      const int l = model_layer[j];
      tau += layer_cost[j];
      // Kept only where a backward will need it, the lowering's rule (LayerGraph): a frozen
      // encoder with nothing trainable upstream runs forward only.
      if (in.model->has_trainable_upstream(l))
        act += scale * in.cost->activation_bytes(l, layer_shape(*in.model, l, all), tp);
      stat += layer_state_bytes(*in.cost, *in.model, l, tp, in.memory, in.dp).total();
    }
    cc.tau.push_back(tau);
    cand.activation.push_back(act);
    cand.static_bytes.push_back(stat);
    cc.peak_memory_bytes = std::max(cc.peak_memory_bytes, stat);  // activations added later
  }
  cc.beta = *std::max_element(cc.tau.begin(), cc.tau.end());
  return cand;
}

/// Tier 2: Eq 4.2, P_reshard, memory with 1F1B in-flight microbatches, throughput.
ParallelPlan rate(const PlannerInputs& in, const std::vector<Component>& comps,
                  const std::vector<Sample>& batch, std::vector<Candidate> picks, int k) {
  ParallelPlan plan;
  plan.dp = in.dp;
  plan.microbatches = k;
  double sum_tau = 0;
  const Candidate& llm = picks.back();
  for (Candidate& p : picks) {
    for (double t : p.config.tau) sum_tau += t;
    plan.beta_max = std::max(plan.beta_max, p.config.beta);
  }
  std::vector<const Sample*> all;
  for (const Sample& s : batch) all.push_back(&s);
  const double scale = static_cast<double>(in.microbatch_size) / static_cast<double>(batch.size());
  for (size_t i = 0; i + 1 < picks.size(); ++i) {
    if (picks[i].tp == llm.tp) continue;
    // Reconstructed (the paper names P_reshard without a formula): every microbatch's
    // boundary tensor is re-split between TP groups forward and its gradient backward,
    // over the intra-node link.
    const int last = comps[i].layers.back();
    const double bytes = scale * in.cost->output_bytes(last, layer_shape(*in.model, last, all));
    plan.reshard_s += 2.0 * k * bytes / in.cluster->intra_node.bandwidth;
  }
  const int llm_pp = llm.config.pp;
  for (size_t i = 0; i < picks.size(); ++i) {
    ComponentConfig& cc = picks[i].config;
    const bool is_llm = i + 1 == picks.size();
    double peak = 0;
    for (int s = 0; const double activation : picks[i].activation) {  // one per stage
      // 1F1B: stage s keeps the microbatches of every stage from it to the chain's end.
      const int in_flight = std::min(k, (cc.pp - s) + (is_llm ? 0 : llm_pp));
      peak = std::max(peak, in_flight * activation);
      ++s;
    }
    cc.peak_memory_bytes += peak;
    if (cc.peak_memory_bytes > in.cluster->gpu.memory_bytes) plan.fits_memory = false;
    plan.components.push_back(cc);
  }
  plan.iteration_s = sum_tau + (k - 1) * plan.beta_max + plan.reshard_s;  // Eq 4.2
  plan.throughput_samples_per_s =
      static_cast<double>(in.dp) * k * in.microbatch_size / plan.iteration_s;
  return plan;
}

int microbatch_count(const PlannerInputs& in) {
  // Alg 3 line 5: B_global must be a multiple of DP x mu.
  if (in.global_batch % (in.dp * in.microbatch_size) != 0) {
    throw InfeasibleError("global batch " + std::to_string(in.global_batch) +
                          " is not a multiple of DP x microbatch size = " +
                          std::to_string(in.dp * in.microbatch_size));
  }
  return in.global_batch / (in.dp * in.microbatch_size);
}

void sort_best_first(std::vector<ParallelPlan>& plans) {
  std::stable_sort(plans.begin(), plans.end(), [](const ParallelPlan& a, const ParallelPlan& b) {
    if (a.fits_memory != b.fits_memory) return a.fits_memory;
    return a.throughput_samples_per_s > b.throughput_samples_per_s;
  });
}

/// Alg 3 lines 1-3, shared by every planner: the profiling batch's size and each
/// component's share of the F + B workload under the config's cost model.
ConfigSearch profiled(const PlannerInputs& in, const std::vector<Component>& comps,
                      const std::vector<Sample>& profiling_batch) {
  if (profiling_batch.empty()) throw InputError("the profiling batch is empty");
  ConfigSearch out;
  out.profiling_size = isize(profiling_batch);
  out.proportions =
      macroscopic_proportions(*in.model, *in.cost, comps, profiling_batch, in.profile_tp);
  return out;
}

}  // namespace

ConfigSearch search_configuration(const PlannerInputs& in,
                                  const std::vector<Sample>& profiling_batch) {
  const std::vector<Component> comps = model_components(*in.model);
  ConfigSearch out = profiled(in, comps, profiling_batch);
  out.allocation = proportional_allocation(in.cluster->num_gpus(), in.dp, in.granularity,
                                           out.proportions);  // line 4
  const int k = microbatch_count(in);
  // Valid (TP, PP) per component: TP x PP = M_i, TP inside a node, PP <= its layers.
  std::vector<std::vector<Candidate>> options(comps.size());
  for (size_t i = 0; i < comps.size(); ++i) {
    const int m = out.allocation[i];
    for (int tp : in.tp_choices) {
      if (tp < 1 || m % tp != 0 || tp > in.cluster->gpus_per_node) continue;
      if (m / tp > isize(comps[i].layers)) continue;
      options[i].push_back(balance_component(in, comps[i], profiling_batch, m, tp));  // tier 1
    }
    if (options[i].empty()) {
      throw InfeasibleError("component '" + comps[i].name + "' has " + std::to_string(m) +
                            " GPUs per replica and no valid TP x PP split of them");
    }
  }
  std::vector<Candidate> picks;
  std::function<void(size_t)> enumerate = [&](size_t i) {
    if (i == comps.size()) {
      out.candidates.push_back(rate(in, comps, profiling_batch, picks, k));  // tier 2
      return;
    }
    for (const Candidate& c : options[i]) {
      picks.push_back(c);
      enumerate(i + 1);
      picks.pop_back();
    }
  };
  enumerate(0);
  sort_best_first(out.candidates);
  return out;
}

ConfigSearch colocated_configuration(const PlannerInputs& in,
                                     const std::vector<Sample>& profiling_batch) {
  const std::vector<Component> comps = model_components(*in.model);
  ConfigSearch out = profiled(in, comps, profiling_batch);
  const int budget = in.cluster->num_gpus() / in.dp;
  const int tp = in.granularity;
  const int k = microbatch_count(in);
  ParallelPlan plan;
  plan.dp = in.dp;
  plan.microbatches = k;
  plan.colocated = true;
  std::vector<double> stage_time(static_cast<size_t>(budget / tp), 0.0);
  std::vector<double> stage_static(stage_time.size(), 0.0);      // every colocated module's
  std::vector<double> stage_activation(stage_time.size(), 0.0);  // one microbatch of each
  for (const Component& c : comps) {
    Candidate cand = balance_component(in, c, profiling_batch, budget, tp);
    for (size_t s = 0; s < stage_time.size(); ++s) {
      stage_time[s] += cand.config.tau[s];
      stage_static[s] += cand.static_bytes[s];
      stage_activation[s] += cand.activation[s];
    }
    out.allocation.push_back(budget);
    plan.components.push_back(cand.config);
  }
  // DIP's list scheduler (variability/dip.hpp, dip_greedy) starts a forward only while the
  // rank stays under the memory cap: it runs every encoder forward before the LLM where
  // memory allows (all K microbatches alive) and waits otherwise. So a stage fits when its
  // modules' state and one microbatch of activations do, and its peak is the smaller of K
  // microbatches and the cap, the same verdict `loom sim` reaches.
  const double cap = in.dip_cap_bytes > 0 ? in.dip_cap_bytes : in.cluster->gpu.memory_bytes;
  double peak = 0;
  for (size_t s = 0; s < stage_time.size(); ++s) {
    if (stage_static[s] + stage_activation[s] > cap) plan.fits_memory = false;
    peak = std::max(peak, std::min(stage_static[s] + k * stage_activation[s], cap));
  }
  for (ComponentConfig& cc : plan.components) cc.peak_memory_bytes = peak;
  double sum = 0;
  for (double t : stage_time) sum += t;
  plan.beta_max = *std::max_element(stage_time.begin(), stage_time.end());
  plan.iteration_s = sum + (k - 1) * plan.beta_max;  // Eq 4.2 over the colocated chain
  plan.throughput_samples_per_s =
      static_cast<double>(in.dp) * k * in.microbatch_size / plan.iteration_s;
  out.candidates.push_back(plan);
  return out;
}

ParallelPlan rate_plan_on(const PlannerInputs& in, const ParallelPlan& plan,
                          const std::vector<Sample>& batch) {
  if (batch.empty()) throw InputError("the evaluation batch is empty");
  const std::vector<Component> comps = model_components(*in.model);
  ParallelPlan out = plan;
  size_t stages = 0;
  for (const ComponentConfig& c : plan.components) stages = std::max(stages, c.stages.size());
  std::vector<double> colocated(stages, 0.0);
  double sum = 0;
  out.beta_max = 0;
  for (size_t i = 0; i < out.components.size(); ++i) {
    ComponentConfig& c = out.components[i];
    const PerComponentLayer<double> costs(macroscopic_layer_costs(
        *in.model, *in.cost, comps[i].layers, batch, in.microbatch_size, c.tp));
    for (size_t s = 0; s < c.stages.size(); ++s) {
      double tau = 0;
      for (ComponentLayer j{c.stages[s].first}; j < ComponentLayer{c.stages[s].end}; ++j)
        tau += costs[j];
      c.tau[s] = tau;
      colocated[s] += tau;
      sum += tau;
    }
    c.beta = *std::max_element(c.tau.begin(), c.tau.end());
    out.beta_max = std::max(out.beta_max, c.beta);
  }
  if (plan.colocated) out.beta_max = *std::max_element(colocated.begin(), colocated.end());
  out.iteration_s = sum + (plan.microbatches - 1) * out.beta_max + plan.reshard_s;  // Eq 4.2
  out.throughput_samples_per_s =
      static_cast<double>(in.dp) * plan.microbatches * in.microbatch_size / out.iteration_s;
  return out;
}

}  // namespace loom
