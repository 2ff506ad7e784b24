#pragma once
// Helpers for the replay tests: hand-built traces and a policy setup with a fixed timer.
#include <memory>
#include <string>
#include <vector>

#include "replay/driver.hpp"
#include "replay/policies.hpp"
#include "traces/availability.hpp"

namespace loom::test {

inline std::vector<std::string> node_names(int n) {
  std::vector<std::string> v;
  for (int i = 1; i <= n; ++i) v.push_back("node" + std::to_string(i));
  return v;
}

/// `initial` nodes at 0, then the given removals ("nodeK" at seconds), window `duration_s`.
inline AvailabilityTrace removal_trace(int initial,
                                       const std::vector<std::pair<double, std::string>>& removals,
                                       double duration_s, double notice_s = 0) {
  AvailabilityTrace t;
  t.source = "test-trace";
  t.initial = node_names(initial);
  for (const auto& [time, node] : removals)
    t.events.push_back({time, AvailabilityChange::kRemove, node, notice_s});
  t.duration_s = duration_s;
  return t;
}

/// Replay options: the global batch and the join rule (default: joins enter at the first
/// boundary, usable at once — the rules the tests written before replay.join assume).
inline ReplayOptions options(int global_batch, JoinRule join = JoinRule::kImmediate,
                             double node_ready_s = 0) {
  ReplayOptions o;
  o.global_batch = global_batch;
  o.join = join;
  o.node_ready_s = node_ready_s;
  return o;
}

/// Node-count setup: every layout takes `iteration_s` seconds per iteration.
inline PolicySetup fixed_setup(double iteration_s, int global_batch = 8, int n0 = 1) {
  PolicySetup s;
  s.global_batch = global_batch;
  s.min_pipeline_nodes = n0;
  s.pipeline_depth = n0;
  s.timer = std::make_shared<MemoizedTimer>([iteration_s](const Layout&) { return iteration_s; });
  return s;
}

}  // namespace loom::test
