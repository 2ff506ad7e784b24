#pragma once
/// Workload variability across microbatches (dissertation §4.7.4, Table 4.3, Fig 4.16):
/// per microbatch, the forward time of each model component (an encoder with its
/// projectors, or the LLM) summed over all the pipeline stages that run it; then its mean
/// and standard deviation over the iteration's microbatches of every replica.
#include <string>
#include <vector>

#include "core/model.hpp"
#include "core/schedule.hpp"

namespace loom {

struct ComponentForwardStats {
  std::string component;               ///< "vision", "llm", ...
  std::vector<double> per_microbatch;  ///< seconds, replica-major then microbatch
  double mean_s = 0;
  double std_s = 0;  ///< population standard deviation
};

/// From the schedule's forward ops (their `seconds`; redundant copies skipped).
std::vector<ComponentForwardStats> component_forward_stats(const Schedule& schedule,
                                                           const Model& model);

}  // namespace loom
