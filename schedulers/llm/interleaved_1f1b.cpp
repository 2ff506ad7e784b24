// Megatron-LM interleaved 1F1B (Narayanan et al. SC'21 §2.2; Megatron-LM
// core/pipeline_parallel/schedules.py): each rank holds v model chunks, so a microbatch
// crosses p x v virtual stages and the pipeline fills v times faster. The rank runs
// microbatches in groups of p per chunk: forwards sweep chunk 0 for microbatches 0..p-1,
// chunk 1 for the same p, ..., then the next p microbatches; backwards sweep the chunks
// in reverse. Bubble time over ideal time drops from (p-1)/m to (p-1)/(v m), at the cost
// of v times more point-to-point messages and a longer warm-up.
//
//   p = 2, v = 2, m = 4 (virtual stages: rank 0 holds 0 and 2, rank 1 holds 1 and 3;
//   warm-up | steady one F one B | cool-down):
//   rank 0: 0F0 0F1 2F0 2F1 | 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 | 2B2 2B3 0B2 0B3
//   rank 1: 1F0 1F1 | 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 | 1B2 1B3
#include <algorithm>

#include "core/errors.hpp"
#include "schedulers/llm/zero_bubble.hpp"

namespace loom {

RankOrders interleaved_1f1b_orders(int p, int m, int v) {
  if (m % p != 0) {
    throw InputError(
        "schedule.microbatches: interleaved-1f1b runs microbatches in groups of "
        "parallel.pp = " +
        std::to_string(p) + "; " + std::to_string(m) +
        " is not a multiple (Megatron's interleaved schedule has the same rule)");
  }
  const int total = m * v;  // virtual microbatches
  // Virtual microbatch k -> (chunk, microbatch); backward sweeps chunks in reverse.
  auto chunk_of = [&](int k, bool forward) {
    const int c = (k % (p * v)) / p;
    return forward ? c : v - 1 - c;
  };
  auto microbatch_of = [&](int k) { return (k / (p * v)) * p + k % p; };
  RankOrders orders(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    auto& order = orders[static_cast<size_t>(r)];
    auto push = [&](int k, Pass pass) {
      order.push_back({chunk_of(k, pass == Pass::kF) * p + r, pass, microbatch_of(k)});
    };
    const int warmup = std::min(total, 2 * (p - r - 1) + (v - 1) * p);
    for (int k = 0; k < warmup; ++k) push(k, Pass::kF);
    for (int j = 0; j < total - warmup; ++j) {
      push(warmup + j, Pass::kF);
      push(j, Pass::kB);
    }
    for (int j = std::max(0, total - warmup); j < total; ++j) push(j, Pass::kB);
  }
  return orders;
}

Schedule generate_interleaved_1f1b(const SchedulingProblem& problem) {
  const int p = problem.parallel.pp;
  const int v = problem.schedule.chunks;
  return lower_virtual_pipeline(problem, "interleaved-1f1b",
                                interleaved_1f1b_orders(p, problem.schedule.microbatches, v), v);
}

}  // namespace loom
