#pragma once
/// SimGrid backend: runs a Schedule in a discrete-event model of the cluster.
///
/// The platform mirrors core/cluster.hpp exactly: one host per GPU, one split-duplex link
/// per GPU (half the intra-node latency) inside a star zone per node, and one split-duplex
/// NIC link per node (half the inter-node latency) in a star zone of nodes. So a transfer
/// alone on its route takes what transfer_time() says, and transfers that share a link
/// (two GPUs of a node sending through one NIC, forward and backward messages leaving one
/// GPU) share its bandwidth max-min fairly, which the contention-free evaluator ignores.
///
/// Every rank executes its program in order with the Schedule IR's semantics
/// (core/schedule.hpp), driven by events rather than by an actor each: a compute is a timer
/// for its cost, a send starts its transfer at once (eager), a receive waits until the data
/// has arrived, a collective's members start their ring (or all-to-all) flows together once
/// the last has arrived and go on when every flow has.
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "core/cluster.hpp"
#include "core/schedule.hpp"
#include "core/timeline.hpp"

namespace loom {

struct Matching;

struct SimGridOptions {
  /// SimGrid network model. "CM02" (default) is latency + size / bandwidth with max-min
  /// sharing, so uncontended results can be checked by hand. "LV08" is SimGrid's
  /// TCP-calibrated model (latency x 13.01, bandwidth x 0.97, cross-traffic).
  std::string network_model = "CM02";
  /// Further SimGrid settings, "key:value" as for --cfg= (e.g. "network/TCP-gamma:4194304").
  std::vector<std::string> extra_cfg;
  /// Called with 0 once the platform and flows are built, then with the fraction of
  /// operations done at every thousandth (the caller decides how often to print:
  /// app/run_progress.hpp); may be empty.
  std::function<void(double done_fraction)> on_progress;
  /// match_operations(schedule), where the caller holds it (else made here).
  const Matching* matching = nullptr;
};

struct SimGridStats {
  double wall_s = 0;      ///< host seconds spent in the simulation (platform + run)
  size_t activities = 0;  ///< compute intervals and messages simulated
  /// Comms left in SimGrid's detached list, finished by a scan of it (sim/simgrid_kernel.hpp);
  /// 0 with the SimGrid these were written against.
  size_t comms_left_detached = 0;
};

/// Runs `schedule` on `cluster` and returns every op's timing. Throws InputError on an
/// unknown network model or setting, InfeasibleError if the schedule deadlocks (naming the
/// blocked ops). SimGrid allows one simulation per process: a second call throws
/// std::logic_error.
Timeline run_simgrid(const Schedule& schedule, const Cluster& cluster,
                     const SimGridOptions& options = {}, SimGridStats* stats = nullptr);

/// The network models run_simgrid accepts.
std::vector<std::string> simgrid_network_models();

}  // namespace loom
