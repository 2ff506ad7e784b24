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
  std::string source;                 ///< file path or generator description
  std::vector<std::string> initial;   ///< nodes alive at time 0 (before any event)
  std::vector<AvailabilityEvent> events;
  double duration_s = 0;              ///< end of the trace (>= last event time)
};

}  // namespace loom
