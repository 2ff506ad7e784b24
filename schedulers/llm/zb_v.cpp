// ZB-V (Qi et al., "Zero Bubble Pipeline Parallelism", arXiv 2401.10241 §6, the version with
// ZB-V, as PyTorch's docstring cites it; the V-shaped building block of Qi et al. 2024,
// "Pipeline Parallelism with Controllable Memory", there V-ZB): the chain is cut into 2p stages
// and placed as a V, rank r holding stage r (its chunk 0, on the way down) and stage 2p-1-r
// (chunk 1, on the way back up), so the first and the last stage live on rank 0 and the loss is
// computed there. Backward is split into I (input gradients) and W (weight gradients). The
// order of each rank is the one PyTorch's ScheduleZBVZeroBubble builds
// (torch.distributed.pipelining, _calculate_single_rank_operations), with n = max(2p-1, m)
// microbatches and those >= m dropped afterwards:
//   warm-up   2(p-r)-1 x F0;  r x (F1, F0);  p-r x (F1, I1, W1)
//   steady    [F0 while any left], I0, W0, F1, I1, W1      until every F is done
//   cool-down r x (I0, I1);  p-r x (I0, W0 of the oldest);  remaining W1;  remaining W0
// (F0 = forward of chunk 0, I1 = input gradient of chunk 1, ...). Every rank holds at
// most 2p chunk-microbatches of activations: p stage-microbatches of a p-stage 1F1B, the
// same peak as 1F1B's rank 0 (§6 claims 1F1B's peak memory). With T_F = T_I = T_W
// per chunk every rank is busy from its first action to its last (zero bubble within its
// span, §6); the iteration is 6 m T + (p-1) T on free links, m >= 2p-1.
//
//   Placement, p = 2 (a microbatch goes down the ranks and back up):
//     rank 0:  [0]           [3]  -> loss
//                \           /
//     rank 1:    [1] ----- [2]      (1 -> 2 stays on rank 1: no message)
//
//   p = 2, m = 4 in time (stage, pass, microbatch; F = I = W = 1 slot per chunk): 25 =
//   6m + p - 1 slots, no idle slot inside either rank's span (the evaluator's timeline)
//   slot:    0   1   2   3   4   5   6   7   8   9  10  11  12  13  14  15  16  17  18
//   rank 0: 0F0 0F1 0F2 3F0 3I0 3W0 3F1 3I1 3W1 0F3 0I0 0W0 3F2 3I2 3W2 0I1 0W1 3F3 3I3
//   rank 1:  .  1F0 2F0 1F1 2F1 2I0 2W0 1F2 1I0 1W0 2F2 2I1 2W1 1F3 1I1 1W1 2F3 2I2 2W2
//   slot:   19  20  21  22  23  24
//   rank 0: 3W3 0I2 0W2 0I3 0W3
//   rank 1: 1I2 2I3 1I3 1W2 2W3 1W3
#include <algorithm>
#include <iterator>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "schedulers/llm/zero_bubble.hpp"

namespace loom {

RankOrders zb_v_orders(int p, int m) {
  const int n = std::max(2 * p - 1, m);  // PyTorch's padding; microbatches >= m dropped
  RankOrders orders(p);
  for (int r = 0; r < p; ++r) {
    const int down = r, up = 2 * p - 1 - r;  // chunk 0 and chunk 1 of rank r
    std::vector<RankAction> all;
    int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
    auto add = [&](int stage, Pass pass, int microbatch) {
      all.push_back(
          {.stage = StageId{stage}, .pass = pass, .microbatch = MicrobatchId{microbatch}});
    };
    for (int k = 0; k < 2 * (p - r) - 1; ++k) add(down, Pass::kF, f0++);
    for (int k = 0; k < r; ++k) {
      add(up, Pass::kF, f1++);
      add(down, Pass::kF, f0++);
    }
    for (int k = 0; k < p - r; ++k) {
      add(up, Pass::kF, f1++);
      add(up, Pass::kI, b1);
      add(up, Pass::kW, b1++);
    }
    while (f1 < f0 || f0 < n) {
      if (f0 < n) add(down, Pass::kF, f0++);
      add(down, Pass::kI, b0);
      add(down, Pass::kW, b0++);
      add(up, Pass::kF, f1++);
      add(up, Pass::kI, b1);
      add(up, Pass::kW, b1++);
    }
    int w0 = b0, w1 = b1;
    for (int k = 0; k < r; ++k) {
      add(down, Pass::kI, b0++);
      add(up, Pass::kI, b1++);
    }
    for (int k = 0; k < p - r; ++k) {
      add(down, Pass::kI, b0++);
      add(down, Pass::kW, w0++);
    }
    while (w1 < b1) add(up, Pass::kW, w1++);
    while (w0 < b0) add(down, Pass::kW, w0++);
    auto& order = orders[PipelineRank{r}];
    std::copy_if(all.begin(), all.end(), std::back_inserter(order),
                 [m](const RankAction& a) { return a.microbatch < MicrobatchId{m}; });
  }
  return orders;
}

PipelinePrograms v_shaped_programs(const SchedulingProblem& problem, const std::string& name,
                                   RankOrders orders) {
  const int p = problem.parallel.pp;
  const int layers = problem.model->num_layers();
  if (problem.schedule.stage_layers.empty() && 2 * p > layers) {
    throw InputError(
        "parallel.pp: " + name + " cuts the model into 2 x parallel.pp = " + std::to_string(2 * p) +
        " stages but it has only " + std::to_string(layers) +
        " layers (each stage needs one); use parallel.pp <= " + std::to_string(layers / 2));
  }
  return {.stages = chain_stages(*problem.model, plan_stages(problem, 2 * p)),
          .ranks = p,
          .stage_rank = zb_v_stage_ranks(p),
          .replicas = {std::move(orders)}};
}

PerStage<PipelineRank> zb_v_stage_ranks(int p) {
  PerStage<PipelineRank> rank(2 * p);
  for (const PipelineRank r : IdRange<PipelineRank>(p)) {
    rank[StageId{r.value()}] = r;  // stage r down, stage 2p - 1 - r back up: the V
    rank[StageId{2 * p - 1 - r.value()}] = r;
  }
  return rank;
}

Schedule generate_zb_v(const SchedulingProblem& problem) {
  require_single_layout(problem, "zb-v");
  const int p = problem.parallel.pp;
  const PipelinePrograms programs =
      v_shaped_programs(problem, "zb-v", zb_v_orders(p, problem.schedule.microbatches));
  return lower(problem, "zb-v", programs);
}

}  // namespace loom
