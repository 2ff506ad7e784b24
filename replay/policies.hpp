#pragma once
/// The fault-tolerance policies `loom replay` compares (dissertation ch. 2):
///   oobleck      pipeline templates, reinstantiation and layer copies (§2.4-2.5)
///   varuna-like  checkpoint every k iterations; any failure = full restart from the last
///                checkpoint on a re-planned pp x dp grid (§2.2, §2.7.1)
///   bamboo-like  the `bamboo` schedule (redundant computation) on every iteration; a
///                failure fails over to the neighbour holding the copy; two adjacent
///                failures = full restart (§2.2)
#include <memory>
#include <string>
#include <vector>

#include "core/cluster.hpp"
#include "core/config.hpp"
#include "replay/layout.hpp"
#include "replay/policy.hpp"
#include "schedulers/planners/oobleck/oobleck_planner.hpp"

namespace loom {

/// Oobleck's plan in simulation mode: the planning problem and its templates.
struct OobleckPlan {
  oobleck::PlanningProblem problem;
  oobleck::PerTemplate<oobleck::PipelineTemplate> templates;
};

struct PolicySetup {
  ReplayConfig params;
  int global_batch = 1;     ///< samples per iteration
  int microbatch_size = 1;  ///< samples per microbatch
  int pipeline_depth = 1;   ///< Varuna/Bamboo: nodes per pipeline of the grid
  /// Varuna-like re-plans its depth (job morphing) among the grids pipeline_depth ..
  /// max_pipeline_depth that use the most nodes, by the timer; 0 = keep pipeline_depth
  /// (measured mode: a table by node count cannot tell grids apart).
  int max_pipeline_depth = 0;
  int bamboo_pipeline_depth = 0;  ///< Bamboo-like's fixed depth; 0 = pipeline_depth
  int min_pipeline_nodes = 1;     ///< Oobleck node-count mode: n0
  std::shared_ptr<MemoizedTimer> timer;
  /// Oobleck with its planner (simulation mode); null = node-count mode, the one the
  /// measured-throughput tables need (the table already contains the planner's choices).
  std::shared_ptr<const OobleckPlan> oobleck;
  LinkSpec copy_link;  ///< the inter-node link layer copies cross (core's route model)
};

/// "oobleck", "varuna-like", "bamboo-like".
const std::vector<std::string>& policy_names();

/// Throws InputError listing the valid names for an unknown one.
std::unique_ptr<ReplayPolicy> make_policy(const std::string& name, const PolicySetup& setup);

std::unique_ptr<ReplayPolicy> make_oobleck_policy(const PolicySetup& setup);
std::unique_ptr<ReplayPolicy> make_varuna_policy(const PolicySetup& setup);
std::unique_ptr<ReplayPolicy> make_bamboo_policy(const PolicySetup& setup);

/// A pp x dp grid: `replicas` pipelines of `depth` nodes sharing the global batch
/// (ceil of the microbatches per replica: the slowest replica sets the pace), in
/// microbatches of `microbatch_size` samples (0 = the setup's).
Layout grid_layout(int depth, int replicas, const PolicySetup& setup, int microbatch_size = 0);

}  // namespace loom
