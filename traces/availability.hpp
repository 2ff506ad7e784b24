#pragma once
/// Node-availability traces: when nodes of a spot (or failure-prone) cluster join and
/// leave. Every source (EC2 add/remove event logs, GCP alive-count series, Oobleck's
/// controlled-failure traces, seeded synthetic generators) becomes one AvailabilityTrace,
/// the only thing the replay driver reads.
///
/// Conventions: times in seconds from the trace start; events sorted by time (ties keep
/// file order); node names are unique strings ("node3", or "gcp-7" for nodes a count series
/// implies). Loaders throw InputError naming the file and line on malformed input.
#include <cstdint>
#include <string>
#include <vector>

namespace loom {

enum class AvailabilityChange : std::uint8_t { kAdd, kRemove };

struct AvailabilityEvent {
  double time_s = 0;
  AvailabilityChange change = AvailabilityChange::kAdd;
  std::string node;
  /// Seconds of warning before a removal takes effect (a preemption notice); 0 = none.
  /// A policy may start reacting at time_s - notice_s.
  double notice_s = 0;
};

struct AvailabilityTrace {
  std::string source;                ///< file path or generator description
  std::vector<std::string> initial;  ///< nodes alive at time 0 (before any event)
  std::vector<AvailabilityEvent> events;
  double duration_s = 0;  ///< end of the trace (>= last event time)
  /// How it was read: "events" (EC2 / Oobleck add-remove log), "counts" (GCP alive-count
  /// series) or "generated".
  std::string format;
  /// Count-series samples that went back in time and were dropped because the caller asked
  /// for it (TraceOptions::out_of_order); 0 for every other source.
  int dropped_out_of_order = 0;
};

/// One step of the alive-node count: from time_s on, `alive` nodes are up.
struct AliveStep {
  double time_s = 0;
  int alive = 0;
};

/// The alive count as a step function: a first step at 0 (the initial nodes), then one
/// step per distinct event time (simultaneous events merge). Assumes a valid trace.
std::vector<AliveStep> alive_steps(const AvailabilityTrace& trace);

/// The nodes alive at time t (events at exactly t applied), in order of arrival.
std::vector<std::string> alive_at(const AvailabilityTrace& trace, double t);

struct AliveStats {
  int min_alive = 0;  ///< over [0, duration_s]
  int max_alive = 0;
  double mean_alive = 0;  ///< time-weighted over [0, duration_s]
  int adds = 0;
  int removes = 0;
  int distinct_nodes = 0;  ///< nodes that are ever alive
};

AliveStats alive_stats(const AvailabilityTrace& trace);

/// Throws InputError (naming trace.source) unless the trace is consistent: times finite,
/// non-negative and sorted, no duplicate initial node, every removal of an alive node,
/// every add of a node not alive, notice_s in [0, time_s], duration_s >= the last event.
void check_availability_trace(const AvailabilityTrace& trace);

}  // namespace loom
