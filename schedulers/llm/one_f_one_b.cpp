// 1F1B (dissertation §4.2.1, Fig 4.2a; PipeDream-Flush): stage s of p warms up with
// min(p - s - 1, m) forwards, then alternates one forward and one backward, then drains
// the remaining backwards. Same iteration time as GPipe, (m + p - 1)(F + B) for equal
// costs, but stage s keeps at most min(p - s, m) microbatches of activations alive.
//
//   stage 0: F0 F1 F2 F3 B0 F4 B1 F5 B2 ...
//   stage 3:          F0 B0 F1 B1 F2 B2 ...
#include "schedulers/lowering/lowering.hpp"

namespace loom {

Schedule generate_1f1b(const SchedulingProblem& problem) {
  const int p = problem.parallel.pp;
  std::vector<int> warmup;
  for (int s = 0; s < p; ++s) warmup.push_back(p - s - 1);
  return lower_pipeline(problem, "1f1b", one_f_one_b_orders(warmup, problem.schedule.microbatches));
}

}  // namespace loom
