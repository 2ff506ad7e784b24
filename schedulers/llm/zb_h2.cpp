// ZB-H2 (zero-bubble pipeline parallelism, Qi et al. ICLR'24 §2.2, Fig 4): more warm-up
// forwards than 1F1B (2(p-s)-1 on stage s) fill the start-up bubble and deferred W fill
// the tail, so with the optimizer-step synchronisation relaxed each stage is busy from its
// first op to its last when T_F + T_B = 2 T_W; in general the bubble inside a stage's span
// is (p-1)(T_F+T_B-2T_W) (paper Table 2) at a peak of 2p-1 microbatches of activations.
//
//   p = 3, m = 6:
//   stage 0: F0 F1 F2 F3 F4 I0 W0 F5 I1 W1 I2 W2 I3 W3 I4 W4 I5 W5
//   stage 2:       F0 I0 F1 I1 F2 I2 F3 I3 F4 I4 W0 F5 I5 W1 W2 W3 W4 W5
#include <algorithm>

#include "schedulers/llm/zero_bubble.hpp"

namespace loom {

StageOrders zb_h2_orders(int p, int m) {
  StageOrders orders(p);
  for (int s = 0; s < p; ++s) {
    StageCursor c{.order = orders[StageId{s}], .end = MicrobatchId{m}};
    const MicrobatchId deferred{std::min(2 * s + 1, m)};  // W held back before the steady phase
    while (c.f < MicrobatchId{std::min(2 * (p - s) - 1, m)}) c.push(Pass::kF);
    // Alternate I and F (W deferred) until `deferred` I are done; end on an I so the
    // stage never holds more than 2p-1 microbatches.
    while (c.i < deferred) {
      c.push(Pass::kI);
      if (c.i < deferred && c.f < c.end) c.push(Pass::kF);
    }
    while (c.f < c.end) {  // steady: W (oldest pending), F, I
      c.push(Pass::kW);
      c.push(Pass::kF);
      c.push(Pass::kI);
    }
    // Cool-down: W before each I, so this stage's I stay two slots behind the next
    // stage's (an I,W order would ask for I before the downstream I can have arrived).
    while (c.i < c.end) {
      c.push(Pass::kW);
      c.push(Pass::kI);
    }
    c.drain_w();
  }
  return orders;
}

Schedule generate_zb_h2(const SchedulingProblem& problem) {
  return lower_pipeline(problem, "zb-h2",
                        zb_h2_orders(problem.parallel.pp, problem.schedule.microbatches));
}

}  // namespace loom
