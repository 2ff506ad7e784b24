#include "traces/availability.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <unordered_set>

#include "core/errors.hpp"

namespace loom {

std::vector<AliveStep> alive_steps(const AvailabilityTrace& trace) {
  std::vector<AliveStep> steps{{0.0, static_cast<int>(trace.initial.size())}};
  int alive = steps.front().alive;
  for (const AvailabilityEvent& e : trace.events) {
    alive += e.change == AvailabilityChange::kAdd ? 1 : -1;
    if (e.time_s == steps.back().time_s) {
      steps.back().alive = alive;  // simultaneous events are one step
    } else {
      steps.push_back({e.time_s, alive});
    }
  }
  return steps;
}

std::vector<std::string> alive_at(const AvailabilityTrace& trace, double t) {
  std::vector<std::string> alive = trace.initial;
  for (const AvailabilityEvent& e : trace.events) {
    if (e.time_s > t) break;
    if (e.change == AvailabilityChange::kAdd) {
      alive.push_back(e.node);
    } else {
      alive.erase(std::find(alive.begin(), alive.end(), e.node));
    }
  }
  return alive;
}

AliveStats alive_stats(const AvailabilityTrace& trace) {
  AliveStats s;
  const std::vector<AliveStep> steps = alive_steps(trace);
  s.min_alive = s.max_alive = steps.front().alive;
  double area = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    s.min_alive = std::min(s.min_alive, steps[i].alive);
    s.max_alive = std::max(s.max_alive, steps[i].alive);
    const double end = i + 1 < steps.size() ? steps[i + 1].time_s : trace.duration_s;
    area += steps[i].alive * std::max(0.0, end - steps[i].time_s);
  }
  s.mean_alive = trace.duration_s > 0 ? area / trace.duration_s : steps.back().alive;
  std::set<std::string> nodes(trace.initial.begin(), trace.initial.end());
  for (const AvailabilityEvent& e : trace.events) {
    (e.change == AvailabilityChange::kAdd ? s.adds : s.removes) += 1;
    nodes.insert(e.node);
  }
  s.distinct_nodes = static_cast<int>(nodes.size());
  return s;
}

void check_availability_trace(const AvailabilityTrace& trace) {
  const std::string& src = trace.source;
  std::unordered_set<std::string> alive;
  for (const std::string& node : trace.initial) {
    if (node.empty()) throw InputError(src + ": an initial node has an empty name");
    if (!alive.insert(node).second) {
      throw InputError(src + ": initial node '" + node + "' listed twice");
    }
  }
  double previous = 0;
  for (size_t i = 0; i < trace.events.size(); ++i) {
    const AvailabilityEvent& e = trace.events[i];
    const std::string where = src + ": event " + std::to_string(i + 1) + " (" + e.node + ")";
    if (!std::isfinite(e.time_s) || e.time_s < previous) {
      throw InputError(where + ": time " + std::to_string(e.time_s) +
                       " s is negative or before the previous event");
    }
    if (!std::isfinite(e.notice_s) || e.notice_s < 0 || e.notice_s > e.time_s) {
      throw InputError(where + ": notice_s must be in [0, time_s]");
    }
    if (e.node.empty()) throw InputError(where + ": empty node name");
    if (e.change == AvailabilityChange::kAdd && !alive.insert(e.node).second) {
      throw InputError(where + ": adds a node that is already alive");
    }
    if (e.change == AvailabilityChange::kRemove && alive.erase(e.node) == 0) {
      throw InputError(where + ": removes a node that is not alive");
    }
    previous = e.time_s;
  }
  if (!std::isfinite(trace.duration_s) || trace.duration_s < previous) {
    throw InputError(src + ": duration_s " + std::to_string(trace.duration_s) +
                     " is before the last event");
  }
}

}  // namespace loom
