#pragma once
/// Seeded synthetic availability traces, for failure frequencies no real trace has.
///
/// Determinism: the same spec gives the same trace on every platform. Randomness comes
/// from std::mt19937_64 (its output sequence is fixed by the C++ standard) through Loom's
/// own uniform and inverse-CDF exponential sampling; std:: distributions are not used
/// because their algorithms differ between standard libraries. Event times are rounded to
/// whole milliseconds, so a generated trace survives write_availability_csv exactly.
/// Nodes are named node1 .. nodeN; all N are alive at time 0 (AvailabilityTrace::initial).
#include <cstdint>

#include "traces/availability.hpp"

namespace loom {

/// "A failure every X minutes without re-joins" (dissertation §2.7.2, Table 2.2: 30 nodes,
/// one failure every 6 h ... 5 min; Oobleck's 5m.csv ... 6h.csv are such traces).
struct PeriodicFailureSpec {
  int nodes = 30;
  double interval_s = 600;  ///< the k-th failure happens at k * interval_s
  int failures = 0;         ///< stop after this many failures; 0 = until min_alive
  int min_alive = 1;        ///< never remove the last min_alive nodes
  double duration_s = 0;    ///< trace end; 0 = right after the last failure
  std::uint64_t seed = 1;   ///< picks which alive node fails (uniformly)
};

/// Poisson failures with re-joins: while alive, each node fails independently with rate
/// failures_per_hour / nodes (so the whole cluster at full strength sees failures_per_hour
/// failures per hour); a failed node comes back after an exponential delay of mean
/// mean_rejoin_s (0 = never). A spot-market-like churn process.
struct PoissonFailureSpec {
  int nodes = 30;
  double failures_per_hour = 6;
  double mean_rejoin_s = 600;
  double duration_s = 6 * 3600;
  std::uint64_t seed = 1;
};

/// Throws InputError naming the bad field (counts < 1, non-positive interval or rate,
/// negative delay or duration, a duration too short for any event).
AvailabilityTrace generate_periodic_failures(const PeriodicFailureSpec& spec);
AvailabilityTrace generate_poisson_failures(const PoissonFailureSpec& spec);

/// Uniform double in [0, 1) from the top 53 bits of one mt19937_64 output.
double uniform01(std::uint64_t bits);
/// Exponential sample of the given mean by inverse CDF: -mean * ln(1 - u), u in [0, 1).
double exponential_sample(double mean, double u);

}  // namespace loom
