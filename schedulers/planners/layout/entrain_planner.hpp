#pragma once
/// Macroscopic-analysis planners of dissertation ch. 4 (§4.4) and the profiling
/// granularities of its baselines (Table 4.1):
///   Entrain     Alg 2 finds the smallest stable profiling batch b_min by Bernoulli trials,
///               then Alg 3 searches the heterogeneous parallel configuration on it
///               (Eq 4.1 intra-module DP, Eq 4.2 iteration time, resharding cost).
///   DistTrain-like  the same disaggregated search on one profiled sample.
///   DIP-like        one profiled microbatch; encoder and LLM stages colocated on every
///                   pipeline stage of the replica (Table 4.1's "8*").
/// Workloads come from the CostModel through core/workload_cost.hpp only.
#include <cstdint>
#include <string>
#include <vector>

#include "core/cluster.hpp"
#include "core/cost_model.hpp"
#include "core/model.hpp"
#include "core/workload.hpp"
#include "core/workload_cost.hpp"
#include "core/workload_gen.hpp"
#include "schedulers/planners/partition/partition.hpp"

namespace loom {

struct PlannerInputs {
  const Model* model = nullptr;
  const CostModel* cost = nullptr;
  const Cluster* cluster = nullptr;
  int dp = 1;                                  ///< DP: replicas; each gets N_total / DP GPUs
  int granularity = 1;                         ///< GPUs per allocation unit (a stage's TP group)
  int profile_tp = 1;                          ///< TP at which workloads are estimated
  int global_batch = 1;                        ///< B_global (samples)
  int microbatch_size = 1;                     ///< mu
  std::vector<int> tp_choices = {1, 2, 4, 8};  ///< TP degrees Alg 3 may give a component
  MemoryConstants memory;
  /// DIP's memory cap per rank (schedule.dip_memory_cap_gb), bytes; 0 = the GPU's memory.
  double dip_cap_bytes = 0;
};

/// Alg 2 line 1: k = ceil(ln alpha / ln(1 - p_error)) validation draws (59 for 0.05/0.05).
int validation_trials(double alpha, double p_error);

/// Alg 2 line 5 ProportionalAllocation: the per-replica budget N_total / DP split in
/// proportion to `p` in units of `granularity` GPUs, rounded to the nearest feasible
/// integers (largest remainder, ties to the earlier component, each at least one unit).
std::vector<int> proportional_allocation(int total_gpus, int dp, int granularity,
                                         const std::vector<double>& p);

/// One row of Table 4.2: a reference batch of `batch_size` plus k validation batches.
struct BernoulliTrial {
  int batch_size = 0;
  bool pass = false;                          ///< every draw gave the reference allocation
  std::vector<int> reference;                 ///< M_ref (GPUs per component)
  std::vector<std::vector<int>> allocations;  ///< distinct allocations seen, sorted
  double min_ratio = 0, max_ratio = 0;        ///< first:second component workload ratio
};
/// Draws all k validation batches (Alg 2 would stop at the first failure; the table keeps
/// drawing to list every allocation, which does not change `pass`).
BernoulliTrial bernoulli_trial(const PlannerInputs& in, const std::vector<Component>& components,
                               const BatchSource& draw, int batch_size, int k);

struct MacroscopicProfile {
  int k = 0;
  int b_min = 0;                       ///< 0 when max_batch was reached without passing
  std::vector<BernoulliTrial> trials;  ///< n0, 2 n0, ... up to b_min
};
/// Alg 2: doubles n from n0 until a Bernoulli trial passes (or n exceeds max_batch).
MacroscopicProfile find_min_profiling_batch(const PlannerInputs& in, const BatchSource& draw,
                                            double alpha, double p_error, int n0, int max_batch);

struct ComponentConfig {
  std::string name;
  int gpus = 0, tp = 1, pp = 1;
  std::vector<StageRange> stages;  ///< indices into the component's own layers
  std::vector<double> tau;         ///< tau_{i,p}: F + B per stage, one microbatch
  double beta = 0;                 ///< max_p tau_{i,p}
  double peak_memory_bytes = 0;    ///< worst stage: static + in-flight activations
};

struct ParallelPlan {
  int dp = 1;
  int microbatches = 0;  ///< K = B_global / (DP mu)
  bool colocated = false;
  std::vector<ComponentConfig> components;
  double beta_max = 0;
  double reshard_s = 0;    ///< P_reshard
  double iteration_s = 0;  ///< Eq 4.2 + P_reshard
  double throughput_samples_per_s = 0;
  bool fits_memory = true;
};

struct ConfigSearch {
  int profiling_size = 0;
  std::vector<double> proportions;       ///< P of the profiling batch
  std::vector<int> allocation;           ///< M (GPUs per component and replica)
  std::vector<ParallelPlan> candidates;  ///< every valid topology, best first
  const ParallelPlan& best() const { return candidates.front(); }
};

/// Alg 3 on `profiling_batch`: for each TP choice per component with TP x PP = M_i,
/// Eq 4.1 partitions each component (tier 1), Eq 4.2 + P_reshard rates the whole (tier 2).
/// Throws InfeasibleError when no topology fits (memory, node size, layers, batch).
ConfigSearch search_configuration(const PlannerInputs& in,
                                  const std::vector<Sample>& profiling_batch);

/// DIP-like (Table 4.1 "*"): every component spans all N_total / (DP TP) stages, stage p
/// runs piece p of each; stage time = sum of the pieces; Eq 4.2 over the colocated chain.
ConfigSearch colocated_configuration(const PlannerInputs& in,
                                     const std::vector<Sample>& profiling_batch);

/// `plan` (its allocation, TP x PP and stage boundaries, as derived from its own profiling
/// batch) rated on another batch, e.g. the dataset: tau from `batch`'s layer costs, then
/// Eq 4.2 (+ the plan's resharding cost). What a micro-profiled plan is worth on the data.
ParallelPlan rate_plan_on(const PlannerInputs& in, const ParallelPlan& plan,
                          const std::vector<Sample>& batch);

/// A name for an allocation: "8:8".
std::string allocation_text(const std::vector<int>& allocation);

}  // namespace loom
