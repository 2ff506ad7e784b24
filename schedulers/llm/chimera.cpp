// Chimera (Li and Hoefler, "Chimera: Efficiently Training Large-Scale Neural Networks with
// Bidirectional Pipelines", SC'21, arXiv 2107.06925 §3.1 Figure 3, §3.5 "direct
// concatenation"; the slot generator of github.com/Shigangli/Chimera): two copies of the
// same p stages run as pipelines in opposite directions over the same p ranks. The down
// pipeline places stage s on rank s, the up pipeline on rank p-1-s, so rank r holds stage r
// of one copy and stage p-1-r of the other, and the two copies of a stage's weights sit on
// ranks r and p-1-r: the lowering all-reduces their gradients (with the data-parallel
// replicas) at the end of the iteration, as the paper does.
//
// The schedule is built in slots of one pass (F or B) each, as the paper draws it. A unit
// is p microbatches, p/2 down and p/2 up; within a pipeline microbatch k of the unit enters
// at slot 2k, moves one stage per slot forward, turns at the last stage and moves back:
//   down microbatch k on rank r:  F at 2k + r,          B at 2k + 2p-1-r
//   up   microbatch k on rank r:  F at 2k + p-1-r,      B at 2k + p+r
// Down F and up B on a rank share the parity of r, down B and up F the other; they coincide
// only for k - k' = p/2, so for even p no slot holds two passes (the paper's conflict-free
// merge). Unit u is shifted by 2p u slots (each rank's work per unit), which stays
// conflict-free and fills the previous unit's tail bubbles. A rank's order is its passes
// sorted by slot. With T_F = T_B = T every rank idles p-2 slots: the iteration is
// (2m + p - 2) T and the bubble ratio (p-2)/(2m+p-2), the paper's Table 2 value.
// Microbatches 0..m/2-1 go down (unit u's k-th is u p/2 + k), m/2..m-1 up.
//
//   p = 4, m = 4 (slot: rank 0 ... 3; 0F0 = stage 0 forward microbatch 0; microbatches 0, 1
//   down, 2, 3 up; rank r holds stage r of the down copy and stage 3-r of the up copy):
//   slot:    0   1   2   3   4   5   6   7   8   9
//   rank 0: 0F0  .  0F1 3F2 3B2 3F3 3B3 0B0  .  0B1
//   rank 1:  .  1F0 2F2 1F1 2F3 2B2 1B0 2B3 1B1  .
//   rank 2:  .  1F2 2F0 1F3 2F1 2B0 1B2 2B1 1B3  .
//   rank 3: 0F2  .  0F3 3F0 3B0 3F1 3B1 0B2  .  0B3
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/errors.hpp"
#include "schedulers/llm/zero_bubble.hpp"

namespace loom {

RankOrders chimera_orders(int p, int m) {
  RankOrders orders(p);
  const int half = p / 2;
  for (int r = 0; r < p; ++r) {
    std::vector<std::pair<int, RankAction>> slotted;
    auto add = [&](int slot, int stage, Pass pass, MicrobatchId mb) {
      slotted.push_back({slot, {.stage = StageId{stage}, .pass = pass, .microbatch = mb}});
    };
    for (int u = 0; u < m / p; ++u) {
      const int shift = 2 * p * u;
      for (int k = 0; k < half; ++k) {
        const MicrobatchId down{u * half + k}, up{m / 2 + u * half + k};
        add(shift + 2 * k + r, r, Pass::kF, down);
        add(shift + 2 * k + 2 * p - 1 - r, r, Pass::kB, down);
        add(shift + 2 * k + p - 1 - r, p - 1 - r, Pass::kF, up);
        add(shift + 2 * k + p + r, p - 1 - r, Pass::kB, up);
      }
    }
    std::sort(slotted.begin(), slotted.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [slot, action] : slotted) orders[PipelineRank{r}].push_back(action);
  }
  return orders;
}

PerStage<PipelineRank> chimera_up_stage_ranks(int p) {
  PerStage<PipelineRank> rank;
  for (int s = 0; s < p; ++s) rank.push_back(PipelineRank{p - 1 - s});
  return rank;
}

std::string chimera_error(int p, int m) {
  if (p % 2 != 0) {
    return "parallel.pp: chimera runs two pipelines in opposite directions and needs an even "
           "number of stages (got " +
           std::to_string(p) + "); use parallel.pp = " + std::to_string(p + 1) +
           (p > 1 ? " or " + std::to_string(p - 1) : std::string());
  }
  if (m < p || m % p != 0) {
    const int below = m / p * p, above = below + p;
    return "schedule.microbatches: chimera runs units of parallel.pp = " + std::to_string(p) +
           " microbatches (half down, half up) and needs a multiple of " + std::to_string(p) +
           " (got " + std::to_string(m) + "); use " +
           (below > 0 ? std::to_string(below) + " or " : std::string()) + std::to_string(above);
  }
  return "";
}

Schedule generate_chimera(const SchedulingProblem& problem) {
  require_single_layout(problem, "chimera");
  const int p = problem.parallel.pp;
  const int m = problem.schedule.microbatches;
  if (const std::string error = chimera_error(p, m); !error.empty()) throw InputError(error);
  const PipelinePrograms programs{.stages = chain_stages(*problem.model, plan_stages(problem, p)),
                                  .ranks = p,
                                  .stage_rank = {},
                                  .replicas = {chimera_orders(p, m)},
                                  .up = SecondPipeline{.stage_rank = chimera_up_stage_ranks(p),
                                                       .first_microbatch = MicrobatchId{m / 2}}};
  return lower(problem, "chimera", programs);
}

}  // namespace loom
