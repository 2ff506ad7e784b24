#pragma once
/// What a replay policy trains on at a given moment: a set of data-parallel pipelines over
/// the live nodes, and the injected timer that says how long one iteration of it takes.
/// The timer is a callback so that replay/ does not depend on a backend: the CLI supplies
/// SimGrid or the evaluator, measured-throughput mode supplies a table (see
/// throughput_table.hpp).
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/errors.hpp"

namespace loom {

/// One pipeline replica.
struct PipelineLayout {
  int nodes = 0;                       ///< nodes it occupies
  std::vector<int> stage_layers = {};  ///< layers per stage in order; empty = the timer's default
  int microbatches = 0;                ///< microbatches it computes per iteration (0 = timer's)
  /// Bamboo: stages whose node is lost and whose neighbour runs them (failover; the
  /// pipeline has `nodes` nodes for nodes + failed_over.size() stages).
  std::vector<int> failed_over = {};
};

/// The pipelines training together (synchronous data parallelism across them).
struct Layout {
  std::vector<PipelineLayout> pipelines = {};
  /// The schedule the pipelines run; "" = replay.scheduler. Bamboo-like runs "bamboo",
  /// whose redundant copies carry its time and memory (schedulers/resilience/bamboo.cpp).
  std::string scheduler = "";
  /// Samples per microbatch; 0 = schedule.microbatch_size (Bamboo's is smaller, Table 2.1).
  int microbatch_size = 0;
  /// Activations are recomputed in the backward pass (Oobleck and Varuna do, Bamboo does
  /// not: dissertation Table 2.1 and its footnote 2). Memory feasibility is then the
  /// planner's to judge, and a timer does not apply its own activation-memory check.
  bool activation_checkpointing = false;
  /// Activation bytes relative to the config's dtype (Bamboo without checkpointing at TF32:
  /// replay.bamboo_activation_factor); 1 or 2.
  double activation_factor = 1;

  int nodes() const;
  /// Canonical text ("3x[2:12,12]/8 1x[3:8,8,8]/10"): equal keys time equally.
  std::string key() const;
};

/// Seconds one iteration of `layout` takes, the global batch fixed. Throws InfeasibleError
/// when the layout cannot run (does not fit memory), TooFewNodesError when it cannot run
/// on this few nodes but might on more (no throughput measured at this node count).
using IterationTimer = std::function<double(const Layout&)>;

class TooFewNodesError : public InfeasibleError {
 public:
  using InfeasibleError::InfeasibleError;
};

/// Calls the wrapped timer once per distinct Layout::key (SimGrid runs are expensive).
class MemoizedTimer {
 public:
  explicit MemoizedTimer(IterationTimer timer) : timer_(std::move(timer)) {}
  double operator()(const Layout& layout);
  size_t distinct_layouts() const { return cache_.size(); }

 private:
  IterationTimer timer_;
  std::map<std::string, double> cache_;
  /// key -> (too few nodes?, message), rethrown on reuse
  std::map<std::string, std::pair<bool, std::string>> infeasible_;
};

}  // namespace loom
