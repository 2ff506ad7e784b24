// SimGrid (sim/simgrid_backend.hpp): the cluster as hosts and links, so transfers that
// share a link share its bandwidth. One simulation per process.
#include "app/backends.hpp"
#include "sim/simgrid_backend.hpp"

namespace loom {

Backend simgrid_backend() {
  Backend b;
  b.name = "simgrid";
  b.summary = "link contention";
  b.label = "SimGrid";
  b.once_per_process = true;
  b.bytes_per_gpu = 4096;  // a SimGrid host with its links
  b.run = [](const Schedule& schedule, const Cluster& cluster, const SimConfig& sim,
             const BackendOptions& options) {
    SimGridOptions sg;
    sg.network_model = sim.network_model;
    sg.extra_cfg = options.extra_cfg;
    sg.on_progress = options.on_progress;
    sg.matching = options.matching;
    SimGridStats stats{};
    BackendRun run;
    run.timeline = run_simgrid(schedule, cluster, sg, &stats);
    run.activities = stats.activities;
    return run;
  };
  return b;
}

}  // namespace loom
