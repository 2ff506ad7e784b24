// GPipe (dissertation §2.4.1.2, Fig 2.5): every stage runs all forwards, then all
// backwards. With p stages and m microbatches of equal cost the iteration is
// (m + p - 1)(F + B) and each stage holds all m microbatches' activations at the peak.
//
//   stage 0: F0 F1 F2 F3 .  .  .  .  .  .  B0 B1 B2 B3
//   stage 1:    F0 F1 F2 F3 .  .  .  .  B0 B1 B2 B3
#include "schedulers/lowering/lowering.hpp"

namespace loom {

Schedule generate_gpipe(const SchedulingProblem& problem) {
  const int m = problem.schedule.microbatches;
  StageOrders orders(problem.parallel.pp);
  for (auto& order : orders) {
    for (const MicrobatchId j : IdRange<MicrobatchId>(m)) order.push_back({Pass::kF, j});
    for (const MicrobatchId j : IdRange<MicrobatchId>(m)) order.push_back({Pass::kB, j});
  }
  return lower_pipeline(problem, "gpipe", orders);
}

}  // namespace loom
