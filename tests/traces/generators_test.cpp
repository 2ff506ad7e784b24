// Seeded synthetic traces: deterministic, valid, and statistically what they claim.
#include "traces/generators.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <sstream>

#include "core/errors.hpp"
#include "traces/trace_io.hpp"

namespace loom {
namespace {

std::string as_csv(const AvailabilityTrace& t) {
  std::ostringstream out;
  write_availability_csv(t, out);
  return out.str();
}

TEST(Sampling, UniformAndExponentialClosedForms) {
  EXPECT_EQ(uniform01(0), 0.0);
  EXPECT_LT(uniform01(~std::uint64_t{0}), 1.0);
  EXPECT_DOUBLE_EQ(uniform01(std::uint64_t{1} << 63), 0.5);
  EXPECT_DOUBLE_EQ(exponential_sample(10, 0.0), 0.0);
  // Inverse CDF: the median of Exp(mean) is mean * ln 2.
  EXPECT_DOUBLE_EQ(exponential_sample(10, 0.5), 10 * std::log(2.0));
}

TEST(Sampling, Mt19937_64IsTheStandardSequence) {
  // The C++ standard fixes mt19937_64's 10000th output for the default seed: this is what
  // makes generated traces identical on every platform.
  std::mt19937_64 rng;
  rng.discard(9999);
  EXPECT_EQ(rng(), 9981545732273789042ULL);
}

TEST(PeriodicFailures, OneFailureEveryIntervalWithoutRejoins) {
  PeriodicFailureSpec spec;  // 30 nodes, like Table 2.2's controlled failures
  spec.interval_s = 600;
  spec.failures = 15;
  const AvailabilityTrace t = generate_periodic_failures(spec);
  EXPECT_EQ(t.initial.size(), 30u);
  ASSERT_EQ(t.events.size(), 15u);
  for (size_t k = 0; k < t.events.size(); ++k) {
    EXPECT_EQ(t.events[k].change, AvailabilityChange::kRemove);
    EXPECT_DOUBLE_EQ(t.events[k].time_s, 600.0 * static_cast<double>(k + 1));
  }
  EXPECT_DOUBLE_EQ(t.duration_s, 9000);
  EXPECT_NO_THROW(check_availability_trace(t));  // each removed node was alive
  EXPECT_EQ(alive_stats(t).min_alive, 15);
}

TEST(PeriodicFailures, StopsAtMinAliveAndDuration) {
  PeriodicFailureSpec spec;
  spec.nodes = 8;
  spec.interval_s = 60;
  spec.min_alive = 3;
  EXPECT_EQ(generate_periodic_failures(spec).events.size(), 5u);
  spec.duration_s = 150;  // failures at 60 and 120 only
  const AvailabilityTrace t = generate_periodic_failures(spec);
  EXPECT_EQ(t.events.size(), 2u);
  EXPECT_DOUBLE_EQ(t.duration_s, 150);
}

TEST(PeriodicFailures, SeedChoosesTheVictimsDeterministically) {
  PeriodicFailureSpec spec;
  spec.failures = 15;
  spec.seed = 42;
  const std::string a = as_csv(generate_periodic_failures(spec));
  EXPECT_EQ(a, as_csv(generate_periodic_failures(spec)));
  spec.seed = 43;
  EXPECT_NE(a, as_csv(generate_periodic_failures(spec)));
}

TEST(PoissonFailures, DeterministicAndValid) {
  PoissonFailureSpec spec;
  spec.seed = 7;
  const AvailabilityTrace a = generate_poisson_failures(spec);
  EXPECT_EQ(as_csv(a), as_csv(generate_poisson_failures(spec)));
  EXPECT_NO_THROW(check_availability_trace(a));
  spec.seed = 8;
  EXPECT_NE(as_csv(a), as_csv(generate_poisson_failures(spec)));
  // Whole milliseconds: the written file loads back as the same trace.
  std::istringstream in(as_csv(a));
  const AvailabilityTrace back = read_availability_trace(in, "gen", {});
  ASSERT_EQ(back.events.size(), a.events.size());
  for (size_t i = 0; i < a.events.size(); ++i) EXPECT_EQ(back.events[i].time_s, a.events[i].time_s);
}

TEST(PoissonFailures, MeanIntervalMatchesTheRate) {
  // With near-instant re-joins the cluster stays at full strength, so failures form a
  // Poisson process of rate failures_per_hour: over 500 h expect 3,000 +- 3 sigma (~164).
  PoissonFailureSpec spec;
  spec.nodes = 30;
  spec.failures_per_hour = 6;
  spec.mean_rejoin_s = 1;
  spec.duration_s = 500 * 3600.0;
  spec.seed = 3;
  const AvailabilityTrace t = generate_poisson_failures(spec);
  const AliveStats s = alive_stats(t);
  EXPECT_NEAR(s.removes, 3000, 164);
  const double mean_interval_s = spec.duration_s / s.removes;
  EXPECT_NEAR(mean_interval_s, 600, 600 * 0.06);
  EXPECT_GT(s.mean_alive, 29.9);
}

TEST(PoissonFailures, DownTimeFollowsTheRejoinDelay) {
  // Each node is down a fraction d / (u + d) of the time, with mean up time u = 30 h / 6
  // = 5 h and mean down time d = 1 h: about 30 * 5/6 = 25 nodes alive on average.
  PoissonFailureSpec spec;
  spec.failures_per_hour = 6;
  spec.mean_rejoin_s = 3600;
  spec.duration_s = 2000 * 3600.0;
  const AliveStats s = alive_stats(generate_poisson_failures(spec));
  EXPECT_NEAR(s.mean_alive, 25.0, 0.5);
}

TEST(PoissonFailures, NoRejoinsMeansOnlyRemovals) {
  PoissonFailureSpec spec;
  spec.mean_rejoin_s = 0;
  spec.failures_per_hour = 30;
  spec.duration_s = 100 * 3600.0;
  const AliveStats s = alive_stats(generate_poisson_failures(spec));
  EXPECT_EQ(s.adds, 0);
  EXPECT_LE(s.removes, 30);
}

TEST(Generators, BadSpecsAreInputErrors) {
  PeriodicFailureSpec p;
  p.nodes = 0;
  EXPECT_THROW(generate_periodic_failures(p), InputError);
  p = {};
  p.interval_s = 0;
  EXPECT_THROW(generate_periodic_failures(p), InputError);
  p = {};
  p.min_alive = 0;  // no failures, no min_alive, no duration: would never end
  EXPECT_THROW(generate_periodic_failures(p), InputError);
  PoissonFailureSpec q;
  q.failures_per_hour = -1;
  EXPECT_THROW(generate_poisson_failures(q), InputError);
  q = {};
  q.duration_s = 0;
  EXPECT_THROW(generate_poisson_failures(q), InputError);
}

}  // namespace
}  // namespace loom
