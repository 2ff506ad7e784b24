#pragma once
/// The simulation backends: a name -> backend table, the only place that knows which
/// exist (STYLE.md point 9; executor/registry.cpp is the executors' counterpart). Each
/// runs a Schedule on a Cluster and returns its Timeline. A new backend is one file in
/// app/backends/ and its line in app/backends.cpp.
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "app/study.hpp"
#include "core/config.hpp"
#include "core/schedule.hpp"
#include "core/timeline.hpp"

namespace loom {

struct Matching;

/// What a caller adds to the config's [sim] table for one run; a backend ignores what
/// it does not use.
struct BackendOptions {
  std::vector<std::string> extra_cfg;  ///< SimGrid settings "key:value" (--simgrid-cfg)
  /// Called with the fraction of operations done (long runs); may be empty.
  std::function<void(double done_fraction)> on_progress;
  /// match_operations(schedule), where the caller holds it (else the backend makes it).
  const Matching* matching = nullptr;
};

/// One run's result.
struct BackendRun {
  Timeline timeline;
  size_t activities = 0;  ///< what the backend simulated (ops, or SimGrid's activities)
};

struct Backend {
  std::string name;     ///< sim.backend, --backend
  std::string summary;  ///< one line for help texts: what it models
  std::string label;    ///< how progress lines name it ("SimGrid", "the evaluator")
  /// It can run only once per process (SimGrid: one Engine), so a caller that runs
  /// several forks one child per run.
  bool once_per_process = false;
  /// Host memory per simulated GPU beyond the schedule's (the plan-size check), bytes.
  double bytes_per_gpu = 0;
  /// Runs `schedule` on `cluster` with the [sim] settings of `sim`. Throws InputError on
  /// a bad setting, InfeasibleError if the schedule deadlocks.
  std::function<BackendRun(const Schedule& schedule, const Cluster& cluster, const SimConfig& sim,
                           const BackendOptions& options)>
      run;
};

/// Every backend, in the order help texts and `loom validate` list them.
const std::vector<Backend>& backends();
std::vector<std::string> backend_names();
/// "evaluator or simgrid"; with `quoted`, "\"evaluator\" or \"simgrid\"".
std::string backend_name_list(bool quoted = false);
/// "evaluator (contention-free, fast) or simgrid (link contention)": for --backend's help.
std::string backend_help();
/// The backend called `name`; InputError naming the valid ones if there is none.
const Backend& find_backend(const std::string& name);

/// Runs `study`'s schedule on its cluster with `backend` (default: its sim.backend).
BackendRun simulate(const Study& study, const std::string& backend,
                    const BackendOptions& options = {});
BackendRun simulate(const Study& study, const BackendOptions& options = {});

}  // namespace loom
