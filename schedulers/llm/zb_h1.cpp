// ZB-H1 (zero-bubble pipeline parallelism, Qi et al. ICLR'24 §2.2, Fig 3): backward split
// into I (input gradients) and W (weight gradients). Stage s keeps 1F1B's warm-up and
// memory, but defers its first s W so that the cool-down bubble of 1F1B is filled with
// them; bubble (p-1)(T_F+T_B-T_W) instead of (p-1)(T_F+T_B+T_W) (paper Table 2).
//
//   p = 4, m = 6 (stage 0 and stage 3; W of the oldest pending microbatch):
//   stage 0: F0 F1 F2 F3 I0 W0 F4 I1 W1 F5 I2 W2 I3 W3 I4 W4 I5 W5
//   stage 3:          F0 I0 F1 I1 F2 I2 F3 I3 W0 F4 I4 W1 F5 I5 W2 W3 W4 W5
#include <algorithm>

#include "schedulers/llm/zero_bubble.hpp"

namespace loom {

StageOrders zb_h1_orders(int p, int m) {
  StageOrders orders(p);
  for (int s = 0; s < p; ++s) {
    StageCursor c{.order = orders[StageId{s}], .end = MicrobatchId{m}};
    // W of the oldest pending microbatch once more than s are pending.
    auto w_beyond = [&] {
      if (c.i - c.w > s) c.push(Pass::kW);
    };
    while (c.f < MicrobatchId{std::min(p - s - 1, m)}) c.push(Pass::kF);
    while (c.f < c.end) {
      c.push(Pass::kF);
      c.push(Pass::kI);
      w_beyond();
    }
    while (c.i < c.end) {
      c.push(Pass::kI);
      w_beyond();
    }
    c.drain_w();
  }
  return orders;
}

Schedule generate_zb_h1(const SchedulingProblem& problem) {
  return lower_pipeline(problem, "zb-h1",
                        zb_h1_orders(problem.parallel.pp, problem.schedule.microbatches));
}

}  // namespace loom
