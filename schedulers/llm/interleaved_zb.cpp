// Interleaved zero bubble (PyTorch torch.distributed.pipelining ScheduleInterleavedZeroBubble,
// "the ZB1P schedule" of Qi et al., "Zero Bubble Pipeline Parallelism", ICLR'24, arXiv
// 2401.10241, run on the looped placement of interleaved 1F1B): v = [schedule.interleaved-zb]
// chunks per rank, chunk c of rank r is stage c p + r, backward split into I (input gradients) and
// W (weight gradients). PyTorch cuts the m microbatches into max(1, m div p) rounds of R = m /
// rounds microbatches (m must divide evenly), which play the part of Megatron's microbatch
// group: virtual microbatch k runs chunk (k div R) mod v forward, the mirrored chunk backward,
// microbatches in order on each chunk (megatron_schedule_table(m, v, R)). Rank r:
//   warm-up   min(m v, (v-1) R + p-1-r) forwards (half of interleaved 1F1B's 2(p-1-r) per hop:
//             an I is shorter than a B)
//   steady    F(warm-up + j), I(j), then once more than r W are pending the W of the oldest I
//   cool-down I(j) (and W as in the steady state); then the r deferred W
// so rank r defers r W into its cool-down, as ZB-H1's stage r does; v = 1 is exactly zb-h1.
// PyTorch then pads the order with idle slots (_add_bubbles_to_actions); idle time is an
// output of simulation here, so the order is all Loom takes.
//
//   p = 2, v = 2, m = 4 (R = 2; rank 0 holds stages 0 and 2, rank 1 holds 1 and 3; warm-up 3
//   and 2 forwards; rank 0 runs each W right after its I, rank 1 one I later):
//   rank 0: 0F0 0F1 2F0 | 2F1 2I0 2W0 0F2 2I1 2W1 0F3 0I0 0W0 2F2 0I1 0W1 2F3 2I2 2W2 |
//           2I3 2W3 0I2 0W2 0I3 0W3
//   rank 1: 1F0 1F1 | 3F0 3I0 3F1 3I1 3W0 1F2 1I0 3W1 1F3 1I1 1W0 3F2 3I2 1W1 3F3 3I3 3W2 |
//           1I2 3W3 1I3 1W2 | 1W3
#include <algorithm>
#include <string>

#include "core/errors.hpp"
#include "schedulers/llm/looped_options.hpp"
#include "schedulers/llm/zero_bubble.hpp"

namespace loom {

int interleaved_zb_round_size(int p, int m) {
  const int rounds = std::max(1, m / p);
  if (m % rounds != 0) {
    // The nearest counts that divide evenly into their own number of rounds.
    int below = m - 1, above = m + 1;
    auto ok = [p](int n) { return n >= 1 && n % std::max(1, n / p) == 0; };
    while (!ok(below)) --below;
    while (!ok(above)) ++above;
    throw InputError(
        "schedule.microbatches: interleaved-zb runs max(1, microbatches div "
        "parallel.pp) = " +
        std::to_string(rounds) + " rounds of equal size (PyTorch's rule), and " +
        std::to_string(m) + " does not divide by " + std::to_string(rounds) +
        "; use schedule.microbatches = " + std::to_string(m - below <= above - m ? below : above) +
        " (or " + std::to_string(m - below <= above - m ? above : below) + ")");
  }
  return m / rounds;
}

RankOrders interleaved_zb_orders(int p, int m, int v) {
  const int round = interleaved_zb_round_size(p, m);
  const int total = m * v;  // virtual microbatches
  return virtual_orders(p, m, v, round, [&](int r, const auto& push) {
    const int warmup = std::min(total, (v - 1) * round + p - 1 - r);
    int weights = 0;  // W issued, in the order of their I
    for (int k = 0; k < warmup; ++k) push(k, Pass::kF);
    for (int j = 0; j < total; ++j) {
      if (warmup + j < total) push(warmup + j, Pass::kF);
      push(j, Pass::kI);
      if (j >= r) push(weights++, Pass::kW);  // more than r W pending: the oldest
    }
    while (weights < total) push(weights++, Pass::kW);
  });
}

Schedule generate_interleaved_zb(const SchedulingProblem& problem) {
  return lower_looped(problem, "interleaved-zb", interleaved_zb_orders);
}

}  // namespace loom
