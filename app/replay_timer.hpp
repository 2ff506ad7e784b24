#pragma once
/// The iteration timer `loom replay` gives the policies in simulation mode.
///
/// A Layout is a set of pipelines. Identical pipelines form a group, and each group is
/// planned as an ordinary Loom study of the config (parallel.pp = its stages, parallel.dp =
/// its pipelines, its microbatches and stage layers, cluster.nodes = its nodes) and run in
/// the chosen backend; the layout's iteration time is the slowest group's. Each group's
/// data-parallel all-reduce is inside its study; the layer-granular sync between groups of
/// different shapes (dissertation §2.6.1) is not simulated (docs/replay.md).
///
/// SimGrid allows one Engine per process, so each SimGrid run happens in a forked child
/// that sends the iteration time back through a pipe. Results are memoized by the caller
/// (MemoizedTimer) and per group here.
#include <string>
#include <vector>

#include "replay/layout.hpp"

namespace loom {

struct StudyTimerOptions {
  std::string config;
  std::vector<std::string> overrides;  ///< the user's --set, applied first
  std::string backend = "evaluator";   ///< a name in app/backends.hpp
  int gpus_per_node = 1;
  bool progress = false;  ///< one stderr line per simulated group
  /// The config's modules (name, dtype bytes) and optimizer bytes per parameter, to count
  /// activations at twice the dtype (Layout::activation_factor = 2) with the same states.
  std::vector<std::pair<std::string, int>> modules;
  double optimizer_bytes_per_param = 12;
};

IterationTimer make_study_timer(const StudyTimerOptions& options);

}  // namespace loom
