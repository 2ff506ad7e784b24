#pragma once
/// The replay driver: advances simulated time iteration by iteration over an availability
/// trace, applies its events to a policy and records what happened.
///
/// Rules (docs/replay.md):
///   - An iteration commits global_batch samples when it finishes; with a policy that
///     checkpoints they become durable only when a checkpoint phase completes, and a
///     rollback moves the undurable iterations' time from training to lost work.
///   - A removal of a node the job uses kills the iteration in flight (its time is lost
///     work) and cuts off a policy action in progress (the time spent stays in its
///     category, its effect is void). A removal of a node that has joined but not entered
///     the job only drops it.
///   - A joined node is usable `node_ready_s` after its join (ReplayOptions::node_ready_s).
///     With JoinRule::kNextReconfiguration it then waits and enters with the next removal
///     the policy sees; with kImmediate it enters at the first iteration or action boundary.
///     Under either rule, while the policy cannot train (no plan fits the nodes it has),
///     ready nodes enter at once: training starts when a plan first fits and restarts when
///     the cluster regrows.
///   - A removal with a preemption notice (AvailabilityEvent::notice_s): the job does not
///     start an iteration it cannot finish before the removal, aborts one in flight when
///     the warning arrives, and the policy may use the grace period (e.g. to checkpoint).
///   - Changes due at the same moment reach the policy as one MembershipChange. The
///     window is [0, duration_s): later events are ignored and an iteration still running
///     at the end counts as lost work.
/// time_s of every TimeUse adds up to duration_s; samples_committed = iterations x batch.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "replay/policy.hpp"
#include "traces/availability.hpp"

namespace loom {

/// When joined nodes enter the job (replay.join, docs/replay.md).
enum class JoinRule : std::uint8_t {
  kNextReconfiguration,  ///< wait for the next removal (Oobleck artifact's simulator)
  kImmediate,            ///< reconfigure at the first boundary after the node is ready
};

/// "next-reconfiguration" or "immediate"; throws InputError naming the valid ones.
JoinRule join_rule_from_string(const std::string& name);

struct ReplayOptions {
  double duration_s = 0;  ///< replay window; 0 = the trace's duration
  int global_batch = 0;   ///< samples per iteration (> 0)
  JoinRule join = JoinRule::kNextReconfiguration;
  double node_ready_s = 45;  ///< a joined node is usable this long after its join, s
};

/// One row of throughput.csv: from time_s on, `nodes` are alive and the job trains at
/// samples_per_s (0 while it restarts, reconfigures, checkpoints or waits).
struct ThroughputStep {
  double time_s = 0;
  int nodes = 0;
  double samples_per_s = 0;
};

/// One row of events.csv.
struct ReplayEvent {
  double time_s = 0;
  /// "start", "remove", "add", "change", "notice", "checkpoint", "stop", "end"; for a join
  /// or a removal the job does not see yet, action "wait" / "drop"
  std::string event;
  int nodes_alive = 0;
  std::string action;
  double cost_s = 0;
  std::string detail;
};

struct ReplayResult {
  std::string policy;
  std::string trace;
  double duration_s = 0;
  int global_batch = 0;
  long long iterations = 0;         ///< committed iterations
  long long samples_committed = 0;  ///< iterations x global_batch
  std::array<double, 6> time_s{};   ///< indexed by TimeUse
  std::vector<ThroughputStep> throughput;
  std::vector<ReplayEvent> events;
  std::string stop_reason;  ///< set when the policy stopped
  double stopped_at_s = -1;

  /// Wall-clock seconds spent on `use`.
  double& time_in(TimeUse use) { return time_s[static_cast<size_t>(use)]; }
  double time_in(TimeUse use) const { return time_s[static_cast<size_t>(use)]; }

  double average_throughput() const {
    return duration_s > 0 ? static_cast<double>(samples_committed) / duration_s : 0;
  }
};

/// Replays `trace` against `policy`. Throws InputError on bad options.
ReplayResult run_replay(const AvailabilityTrace& trace, ReplayPolicy& policy,
                        const ReplayOptions& options);

}  // namespace loom
