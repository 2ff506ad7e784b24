#include "schedulers/llm/combined_1f1b.hpp"

#include "core/errors.hpp"

namespace loom {

void pair_forwards_with_backwards(RankOrders& orders) {
  for (auto& order : orders) {
    for (size_t k = 0; k + 1 < order.size(); ++k) {
      RankAction& f = order[k];
      const RankAction& b = order[k + 1];
      if (f.kind == ActionKind::kCompute && b.kind == ActionKind::kCompute && f.pass == Pass::kF &&
          b.pass == Pass::kB && f.microbatch != b.microbatch && f.with_next == Join::kNone &&
          b.with_next == Join::kNone) {
        f.with_next = Join::kOverlap;
        ++k;  // the backward belongs to this pair
      }
    }
  }
}

void check_moe_overlap(const SchedulingProblem& problem, const std::string& scheduler) {
  if (problem.parallel.ep > 1) return;
  throw InputError("schedule." + scheduler +
                   ".overlap_moe_a2a: overlaps expert-parallel all-to-alls, and this run has "
                   "none (parallel.ep = 1): set parallel.ep > 1 on a model with experts, or "
                   "remove the option");
}

}  // namespace loom
