#pragma once
/// Counter tracks for the Perfetto trace (timeline.json): values over time, drawn beside
/// the ranks' tracks under a process of their own (core/link_load.hpp draws the busiest
/// links with them).
#include <string>
#include <utility>
#include <vector>

#include "core/schedule.hpp"
#include "core/timeline.hpp"

namespace loom {

struct CounterTrack {
  std::string name;  ///< "nic-3 up"
  std::string unit;  ///< the argument's name, "GB/s"
  std::vector<std::pair<double, double>>
      points;  ///< (time s, value), the value holds until the next
};

/// write_chrome_trace, plus `counters` as counter events ("ph":"C") under one process
/// named `counters_process`, after the ranks'.
void write_chrome_trace(const std::string& path, const Schedule& schedule, const Timeline& timeline,
                        const std::vector<CounterTrack>& counters,
                        const std::string& counters_process);

}  // namespace loom
