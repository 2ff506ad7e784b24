// Entrain's per-iteration assignment + deferral cost (dissertation §4.5, Algorithm 4):
// K microbatches of `mbs` samples per replica, per-sample workloads drawn independently
// per modality (Fig 4.3: lognormal encoder and LLM work). Prints the median and the worst
// of `reps` iterations for each (K, dp). The target: K = 128 under 10 ms.
//
// K_eff is forced to K (DeferralOptions::min_microbatches = K) so that the deferral really
// runs on K microbatches; the lognormal tails would otherwise lower K_eff (line 3).
//
//   loom_bench_entrain [reps=20] [mbs=4]
#include "schedulers/variability/entrain_assign.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace {

loom::PerSample<loom::SampleWork> draw(std::mt19937_64& rng, int n) {
  std::lognormal_distribution<double> enc(0.0, 0.8), llm(0.0, 0.6);
  loom::PerSample<loom::SampleWork> w;
  for (int i = 0; i < n; ++i) w.push_back({enc(rng) * 1e-3, llm(rng) * 2e-3});
  return w;
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 20;
  const int mbs = argc > 2 ? std::atoi(argv[2]) : 4;
  std::printf("%6s %4s %8s %12s %12s %10s %10s\n", "K", "dp", "samples", "median_ms", "max_ms",
              "K_eff", "max_llm_x");
  for (int k : {16, 32, 64, 128, 256}) {
    for (int dp : {1, 4}) {
      std::mt19937_64 rng(static_cast<unsigned>(k * 31 + dp));
      std::vector<double> ms;
      double ratio = 0;
      int k_eff = 0;
      for (int r = 0; r < reps; ++r) {
        const auto w = draw(rng, k * dp * mbs);
        const auto t0 = std::chrono::steady_clock::now();
        loom::DeferralOptions options;
        options.min_microbatches = k;
        const loom::EntrainAssignment a = loom::entrain_assign(w, dp, k, options);
        const auto t1 = std::chrono::steady_clock::now();
        ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        k_eff = a.k_eff;
        for (const auto& p : a.replicas) ratio += p.bottleneck_s / p.max_llm_before_s;
      }
      std::sort(ms.begin(), ms.end());
      std::printf("%6d %4d %8d %12.3f %12.3f %10d %10.3f\n", k, dp, k * dp * mbs, ms[ms.size() / 2],
                  ms.back(), k_eff, ratio / (reps * dp));
    }
  }
  return 0;
}
