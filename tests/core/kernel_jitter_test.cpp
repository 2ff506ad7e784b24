// Kernel-time noise (core/kernel_jitter.hpp): the factors have the stated distribution,
// reruns are identical, iterations differ, and only compute ops move.
#include "core/kernel_jitter.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <variant>

namespace loom {
namespace {

Schedule ops_of_one_second(int ranks, int computes) {
  Schedule s;
  for (int r = 0; r < ranks; ++r) {
    s.ranks.push_back({.gpu = r});
    std::vector<Op> program;
    for (int i = 0; i < computes; ++i) {
      Compute compute;
      compute.microbatch = MicrobatchId{i};
      compute.seconds = 1.0;
      compute.weight_grad_s = 0.5;
      program.push_back(compute);
      Send send;
      send.peer = RankId{(r + 1) % ranks};
      send.bytes = 1e6;
      program.push_back(send);
    }
    s.programs.push_back(std::move(program));
  }
  return s;
}

std::vector<double> compute_seconds(const Schedule& s) {
  std::vector<double> out;
  for (const auto& program : s.programs)
    for (const Op& op : program)
      if (const auto* c = std::get_if<Compute>(&op)) out.push_back(c->seconds);
  return out;
}

TEST(KernelJitter, ZeroSigmaLeavesTheScheduleAlone) {
  Schedule s = ops_of_one_second(2, 10);
  const Schedule before = s;
  apply_kernel_jitter(s, {.sigma = 0});
  EXPECT_EQ(s, before);
}

TEST(KernelJitter, FactorsAreNormalWithTheStatedSigmaTruncatedAtThreeSigma) {
  Schedule s = ops_of_one_second(4, 5000);
  const double sigma = 0.05;
  apply_kernel_jitter(s, {.sigma = sigma, .seed = 7});
  const std::vector<double> t = compute_seconds(s);
  double sum = 0, sq = 0;
  for (double v : t) {
    EXPECT_GE(v, 1 - 3 * sigma - 1e-12);
    EXPECT_LE(v, 1 + 3 * sigma + 1e-12);
    sum += v;
    sq += v * v;
  }
  const double n = static_cast<double>(t.size());
  const double mean = sum / n;
  const double sd = std::sqrt(sq / n - mean * mean);
  // 20,000 draws: the mean's standard error is sigma / 141; truncation at 3 sigma lowers
  // the standard deviation by 1.3 %.
  EXPECT_NEAR(mean, 1.0, 4 * sigma / std::sqrt(n));
  EXPECT_NEAR(sd / sigma, 0.987, 0.03);
}

TEST(KernelJitter, WeightGradientShareMovesWithItsOp) {
  Schedule s = ops_of_one_second(1, 50);
  apply_kernel_jitter(s, {.sigma = 0.1, .seed = 3});
  for (const Op& op : s.programs[0_rank]) {
    if (const auto* c = std::get_if<Compute>(&op)) {
      EXPECT_DOUBLE_EQ(c->weight_grad_s, c->seconds / 2);
    } else {
      EXPECT_EQ(std::get<Send>(op).bytes, 1e6);  // communication is not a kernel time
    }
  }
}

TEST(KernelJitter, SameSeedSameNoiseAndEachIterationDrawsAfresh) {
  Schedule a = ops_of_one_second(3, 100), b = a, c = a, d = a;
  apply_kernel_jitter(a, {.sigma = 0.02, .seed = 1, .offset = 0});
  apply_kernel_jitter(b, {.sigma = 0.02, .seed = 1, .offset = 0});
  apply_kernel_jitter(c, {.sigma = 0.02, .seed = 1, .offset = 512});
  apply_kernel_jitter(d, {.sigma = 0.02, .seed = 2, .offset = 0});
  EXPECT_EQ(compute_seconds(a), compute_seconds(b));
  EXPECT_NE(compute_seconds(a), compute_seconds(c));
  EXPECT_NE(compute_seconds(a), compute_seconds(d));
}

TEST(KernelJitter, ARanksDrawsDoNotDependOnOtherRanks) {
  // Rank 0 runs fewer ops in one schedule: rank 1, drawn after it, must not notice.
  Schedule full = ops_of_one_second(2, 10);
  Schedule short_first = full;
  short_first.programs[0_rank].resize(2);
  apply_kernel_jitter(full, {.sigma = 0.05});
  apply_kernel_jitter(short_first, {.sigma = 0.05});
  EXPECT_EQ(full.programs[1_rank], short_first.programs[1_rank]);
}

}  // namespace
}  // namespace loom
