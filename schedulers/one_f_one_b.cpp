// 1F1B (dissertation §4.2.1, Fig 4.2a; PipeDream-Flush): stage s of p warms up with
// min(p - s - 1, m) forwards, then alternates one forward and one backward, then drains
// the remaining backwards. Same iteration time as GPipe, (m + p - 1)(F + B) for equal
// costs, but stage s keeps at most min(p - s, m) microbatches of activations alive.
//
//   stage 0: F0 F1 F2 F3 B0 F4 B1 F5 B2 ...
//   stage 3:          F0 B0 F1 B1 F2 B2 ...
#include <algorithm>

#include "schedulers/pipeline.hpp"

namespace loom {

Schedule generate_1f1b(const SchedulingProblem& problem) {
  const int p = problem.parallel.pp;
  const int m = problem.schedule.microbatches;
  StageOrders orders(static_cast<size_t>(p));
  for (int s = 0; s < p; ++s) {
    auto& order = orders[static_cast<size_t>(s)];
    const int warmup = std::min(p - s - 1, m);
    int next_f = 0;
    int next_b = 0;
    for (; next_f < warmup; ++next_f) order.push_back({Pass::kF, next_f});
    while (next_f < m) {
      order.push_back({Pass::kF, next_f++});
      order.push_back({Pass::kB, next_b++});
    }
    while (next_b < m) order.push_back({Pass::kB, next_b++});
  }
  return lower_pipeline(problem, "1f1b", orders);
}

}  // namespace loom
