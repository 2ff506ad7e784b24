#pragma once
/// Per-sample and per-batch workloads of the model's components, through the CostModel
/// interface only (analytical or `calibrated`, the quadratic per-layer fit of dissertation
/// §4.4.1): planners never use a private formula.
///
/// A component (dissertation §4.4.3, "modality component") is one encoder with the
/// projectors that follow it, or the LLM. Its workload for a set of samples is the sum
/// over its layers of F + Bd + Bw (frozen status applied, Eq 3.2), each sample costed as
/// its own sequence (attention is quadratic per sample).
#include <string>
#include <vector>

#include "core/cost_model.hpp"
#include "core/model.hpp"
#include "core/workload.hpp"

namespace loom {

struct Component {
  std::string name;         ///< the owner module's name ("vision", "llm")
  std::vector<int> layers;  ///< global layer indices, in model order
};

/// Encoders (each with the projectors whose first input chain leads to it), then the LLM.
std::vector<Component> model_components(const Model& model);

/// Workload (seconds of F + B on a stage of `tp` GPUs) of each component for one sample.
std::vector<double> sample_component_workload(const Model& model, const CostModel& cost,
                                              const std::vector<Component>& components,
                                              const Sample& sample, int tp);

/// Forward time of each component for one microbatch of `samples` on `tp` GPUs (what
/// Table 4.3 measures per microbatch).
std::vector<double> microbatch_component_forward(const Model& model, const CostModel& cost,
                                                 const std::vector<Component>& components,
                                                 const std::vector<const Sample*>& samples, int tp);

/// Workload proportions P_i of a batch (Alg 2 EstimateMacroscopicProportions): each
/// component's workload for the batch (every sample its own sequence, one cost query per
/// layer) over the total. Sums to 1.
std::vector<double> macroscopic_proportions(const Model& model, const CostModel& cost,
                                            const std::vector<Component>& components,
                                            const std::vector<Sample>& batch, int tp);

/// Per-layer F + B of one "macroscopic microbatch": the batch's total per layer scaled to
/// `microbatch_size` samples (T_{l,i} of Alg 3 evaluated on the profiling batch).
std::vector<double> macroscopic_layer_costs(const Model& model, const CostModel& cost,
                                            const std::vector<int>& layers,
                                            const std::vector<Sample>& batch, int microbatch_size,
                                            int tp);

}  // namespace loom
