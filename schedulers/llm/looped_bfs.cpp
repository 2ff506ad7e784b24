// Breadth-first looped pipeline (Lamy-Poirier, "Breadth-First Pipeline Parallelism", MLSys 2023,
// arXiv 2211.05953, the looped breadth-first schedule; PyTorch torch.distributed.pipelining
// ScheduleLoopedBFS): the looped placement of interleaved 1F1B (v = [schedule.looped-bfs] chunks
// stages per rank, stage s on rank s mod p, chunk c of rank r is stage c p + r), but each rank runs
// a chunk breadth-first: the forwards of every microbatch on chunk 0, then on chunk 1, ..., then
// the backwards chunk by chunk in reverse, each chunk's microbatches in reverse order (PyTorch's
// order: the last microbatch's activations are the freshest). No forward/backward interleaving,
// so every rank keeps all v m chunk-microbatches alive at the peak (GPipe's memory), but the
// pipeline fills v times faster: with m >= p and equal per-chunk costs the iteration is
// (v m + p - 1)(T_F + T_B) / v in per-stage times, bubble over ideal (p-1)/(v m), as in
// interleaved 1F1B.
//
//   p = 2, v = 2, m = 4 (rank 0 holds stages 0 and 2, rank 1 holds 1 and 3):
//   rank 0: 0F0 0F1 0F2 0F3 2F0 2F1 2F2 2F3 | 2B3 2B2 2B1 2B0 0B3 0B2 0B1 0B0
//   rank 1: 1F0 1F1 1F2 1F3 3F0 3F1 3F2 3F3 | 3B3 3B2 3B1 3B0 1B3 1B2 1B1 1B0
//
//   in time (F = B = 1 per chunk, one cell each; 18 = (v m + p - 1)(F + B)):
//   rank 0: 0F0 0F1 0F2 0F3 2F0 2F1 2F2 2F3  .   .  2B3 2B2 2B1 2B0 0B3 0B2 0B1 0B0
//   rank 1:  .  1F0 1F1 1F2 1F3 3F0 3F1 3F2 3F3 3B3 3B2 3B1 3B0 1B3 1B2 1B1 1B0  .
#include "schedulers/llm/looped_options.hpp"
#include "schedulers/llm/zero_bubble.hpp"

namespace loom {

RankOrders looped_bfs_orders(int p, int m, int v) {
  RankOrders orders(p);
  for (int r = 0; r < p; ++r) {
    auto& order = orders[PipelineRank{r}];
    for (int c = 0; c < v; ++c) {
      for (const MicrobatchId j : IdRange<MicrobatchId>(m))
        order.push_back({.stage = StageId{c * p + r}, .pass = Pass::kF, .microbatch = j});
    }
    for (int c = v - 1; c >= 0; --c) {
      for (int j = m - 1; j >= 0; --j)
        order.push_back(
            {.stage = StageId{c * p + r}, .pass = Pass::kB, .microbatch = MicrobatchId{j}});
    }
  }
  return orders;
}

Schedule generate_looped_bfs(const SchedulingProblem& problem) {
  return lower_looped(problem, "looped-bfs", looped_bfs_orders);
}

}  // namespace loom
