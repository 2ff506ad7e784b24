#include "traces/generators.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>
#include <string>

#include "core/errors.hpp"

namespace loom {

namespace {

/// Whole milliseconds, so that written traces read back exactly (see generators.hpp).
double round_ms(double t_s) {
  return std::round(t_s * 1000.0) / 1000.0;
}

std::vector<std::string> node_names(int n) {
  std::vector<std::string> names;
  for (int i = 1; i <= n; ++i) names.push_back("node" + std::to_string(i));
  return names;
}

void require(bool ok, const std::string& generator, const std::string& what) {
  if (!ok) throw InputError(generator + " generator: " + what);
}

std::string describe(double value) {
  std::ostringstream s;
  s << value;
  return s.str();
}

}  // namespace

double uniform01(std::uint64_t bits) {
  return static_cast<double>(bits >> 11) * 0x1.0p-53;  // 53 random mantissa bits
}

double exponential_sample(double mean, double u) {
  return -mean * std::log1p(-u);
}

AvailabilityTrace generate_periodic_failures(const PeriodicFailureSpec& spec) {
  const std::string g = "periodic";
  require(spec.nodes >= 1, g, "nodes must be >= 1, got " + std::to_string(spec.nodes));
  require(spec.interval_s > 0 && std::isfinite(spec.interval_s), g,
          "interval must be a positive number of seconds, got " + describe(spec.interval_s));
  require(spec.failures >= 0, g, "failures must be >= 0, got " + std::to_string(spec.failures));
  require(spec.min_alive >= 0 && spec.min_alive <= spec.nodes, g,
          "min_alive must be in [0, nodes], got " + std::to_string(spec.min_alive));
  require(spec.duration_s >= 0 && std::isfinite(spec.duration_s), g,
          "duration must be >= 0 seconds, got " + describe(spec.duration_s));
  require(spec.failures > 0 || spec.min_alive > 0 || spec.duration_s > 0, g,
          "give failures, min_alive or a duration: otherwise the trace never ends");

  std::mt19937_64 rng(spec.seed);
  AvailabilityTrace trace;
  trace.format = "generated";
  trace.source = "periodic: " + std::to_string(spec.nodes) + " nodes, a failure every " +
                 describe(spec.interval_s) + " s, seed " + std::to_string(spec.seed);
  trace.initial = node_names(spec.nodes);
  std::vector<std::string> alive = trace.initial;
  for (int k = 1; spec.failures == 0 || k <= spec.failures; ++k) {
    const double t = round_ms(k * spec.interval_s);
    if (static_cast<int>(alive.size()) <= spec.min_alive) break;
    if (spec.duration_s > 0 && t > spec.duration_s) break;
    // Which node fails is uniform over the alive ones: Oobleck's own traces remove nodes
    // in no particular order (5m.csv removes node3 before node22 before node17).
    const auto pick = static_cast<size_t>(uniform01(rng()) * static_cast<double>(alive.size()));
    trace.events.push_back({t, AvailabilityChange::kRemove, alive[pick], 0.0});
    alive.erase(alive.begin() + static_cast<std::ptrdiff_t>(pick));
  }
  const double last = trace.events.empty() ? 0.0 : trace.events.back().time_s;
  trace.duration_s = spec.duration_s > 0 ? spec.duration_s : last;
  return trace;
}

AvailabilityTrace generate_poisson_failures(const PoissonFailureSpec& spec) {
  const std::string g = "poisson";
  require(spec.nodes >= 1, g, "nodes must be >= 1, got " + std::to_string(spec.nodes));
  require(spec.failures_per_hour > 0 && std::isfinite(spec.failures_per_hour), g,
          "failures per hour must be > 0, got " + describe(spec.failures_per_hour));
  require(spec.mean_rejoin_s >= 0 && std::isfinite(spec.mean_rejoin_s), g,
          "mean rejoin delay must be >= 0 seconds, got " + describe(spec.mean_rejoin_s));
  require(spec.duration_s > 0 && std::isfinite(spec.duration_s), g,
          "duration must be > 0 seconds, got " + describe(spec.duration_s));

  // Each node alternates exponential up times (rate failures_per_hour / nodes) and
  // exponential down times: the superposition is a Poisson failure process of the whole
  // cluster's rate while all nodes are up. One generator stream, consumed node by node.
  const double mean_up_s = 3600.0 * spec.nodes / spec.failures_per_hour;
  std::mt19937_64 rng(spec.seed);
  AvailabilityTrace trace;
  trace.format = "generated";
  trace.source = "poisson: " + std::to_string(spec.nodes) + " nodes, " +
                 describe(spec.failures_per_hour) + " failures/h, mean rejoin " +
                 describe(spec.mean_rejoin_s) + " s, seed " + std::to_string(spec.seed);
  trace.initial = node_names(spec.nodes);
  for (const std::string& node : trace.initial) {
    for (double t = 0;;) {
      t += exponential_sample(mean_up_s, uniform01(rng()));
      if (round_ms(t) > spec.duration_s) break;
      trace.events.push_back({round_ms(t), AvailabilityChange::kRemove, node, 0.0});
      if (spec.mean_rejoin_s == 0) break;
      t += exponential_sample(spec.mean_rejoin_s, uniform01(rng()));
      if (round_ms(t) > spec.duration_s) break;
      trace.events.push_back({round_ms(t), AvailabilityChange::kAdd, node, 0.0});
    }
  }
  // Stable: simultaneous events keep node order, and one node's remove stays before its
  // own re-join even when both round to the same millisecond.
  std::stable_sort(
      trace.events.begin(), trace.events.end(),
      [](const AvailabilityEvent& a, const AvailabilityEvent& b) { return a.time_s < b.time_s; });
  trace.duration_s = spec.duration_s;
  return trace;
}

}  // namespace loom
