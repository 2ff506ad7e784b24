#pragma once
/// The interface between the replay driver and a fault-tolerance policy (dissertation
/// ch. 2: Oobleck, and the Varuna-like and Bamboo-like baselines of §2.2 and §2.7).
///
/// The driver owns simulated time. It asks the policy how long the next iteration takes,
/// tells it when an iteration finished and when nodes leave or join, and the policy
/// answers with an Action: what it does and how many seconds it costs before training
/// resumes. The driver accounts those seconds and commits samples; the policy never sees
/// the clock except through these calls.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace loom {

/// Where wall-clock time goes (dissertation Fig 2.11's breakdown).
enum class TimeUse : std::uint8_t {
  kTraining,         ///< iterations that finished (and were not rolled back)
  kRestart,          ///< full restart: re-rendezvous, reload a checkpoint
  kCheckpoint,       ///< saving checkpoints
  kReconfiguration,  ///< reinstantiation, layer copies, failover, rendezvous
  kLostWork,         ///< iterations in flight at a failure, or rolled back to a checkpoint
  kIdle,             ///< nothing to do: waiting for a removal, stopped, too few nodes
};
const char* to_string(TimeUse use);

/// One part of an action's cost.
struct Phase {
  TimeUse use = TimeUse::kReconfiguration;
  double seconds = 0;
  bool checkpoint = false;  ///< when it completes, every finished iteration is durable
};

/// A policy's response and its cost: phases run one after another before training resumes.
struct Action {
  std::string name;  ///< events.csv `action`: "reinstantiate", "restart", "checkpoint", ...
  std::vector<Phase> phases;
  bool rollback = false;  ///< iterations since the last checkpoint are lost (Varuna-like)
  bool stop = false;      ///< the policy cannot go on: the rest of the trace is idle
  std::string detail;     ///< free text for events.csv

  double cost_s() const {
    double s = 0;
    for (const Phase& p : phases) s += p.seconds;
    return s;
  }
};

/// Nodes that left and/or joined since the last call (events due at one instant merge;
/// a node that joined and left in between appears in neither list).
struct MembershipChange {
  double time_s = 0;
  std::vector<std::string> removed;
  std::vector<std::string> added;
  std::vector<std::string> alive;  ///< after the change, in order of arrival
  bool iteration_lost = false;     ///< an iteration was in flight and is lost
  /// The policy's previous action was cut off by this change (its effect did not happen).
  std::string interrupted_action;
};

class ReplayPolicy {
 public:
  virtual ~ReplayPolicy() = default;
  virtual std::string name() const = 0;

  /// Plans for the nodes alive at time 0; the action's cost is paid before iteration 1.
  virtual Action start(const std::vector<std::string>& alive) = 0;

  /// Seconds the next iteration takes on the current plan; nullopt while the policy cannot
  /// train (stopped, waiting for nodes).
  virtual std::optional<double> iteration_s() = 0;

  /// Why the policy can never train in this setting (e.g. its layout does not fit GPU
  /// memory at any node count), or "" while it can; asked when iteration_s() has none.
  virtual std::string fatal() const { return ""; }

  /// Nodes that train now (for throughput.csv and messages).
  virtual int nodes_in_use() const = 0;

  /// True when finished iterations become durable only at a checkpoint (Varuna-like);
  /// false when they are durable at once (state replicated in GPU memory).
  virtual bool uses_checkpoints() const { return false; }

  /// After each finished iteration, at its end time: e.g. a checkpoint every k iterations.
  virtual std::optional<Action> after_iteration(double /*time_s*/) { return std::nullopt; }

  /// A removal was announced and the next iteration cannot finish before it: the job
  /// stopped at `time_s`, `removal_s - time_s` seconds before the node goes. An action
  /// (e.g. a checkpoint) that fits in that grace period takes effect; one that does not is
  /// cut off by the removal.
  virtual std::optional<Action> on_notice(double /*time_s*/, double /*removal_s*/) {
    return std::nullopt;
  }

  /// Nodes left and/or joined.
  virtual Action on_change(const MembershipChange& change) = 0;
};

}  // namespace loom
