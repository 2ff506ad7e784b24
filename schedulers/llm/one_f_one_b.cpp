// 1F1B (dissertation §4.2.1, Fig 4.2a; PipeDream-Flush): stage s of p warms up with
// min(p - s - 1, m) forwards, then alternates one forward and one backward, then drains
// the remaining backwards. Same iteration time as GPipe, (m + p - 1)(F + B) for equal
// costs, but stage s keeps at most min(p - s, m) microbatches of activations alive.
//
//   stage 0: F0 F1 F2 F3 B0 F4 B1 F5 B2 ...
//   stage 3:          F0 B0 F1 B1 F2 B2 ...
//
// With `overlap_moe_a2a` (combined_1f1b.hpp) every stage warms up with one forward more, so
// that each steady-state forward is followed by the backward of another microbatch, the
// last stage's too, and each such pair runs overlapped (Megatron-Core's combined 1F1B).
#include <algorithm>

#include "schedulers/llm/combined_1f1b.hpp"
#include "schedulers/lowering/lowering.hpp"
#include "schedulers/scheduler_options.hpp"

namespace loom {

namespace {
struct OneFOneBOptions {
  bool overlap_moe_a2a = false;
};
const OptionSet<OneFOneBOptions> kOptions{
    {"overlap_moe_a2a",
     &OneFOneBOptions::overlap_moe_a2a,
     "run each steady-state forward with the next backward of another microbatch as one "
     "overlapped pair, hiding each half's expert-parallel all-to-alls under the other's "
     "compute (Megatron-Core's combined 1F1B); one more warm-up forward per stage; needs "
     "parallel.ep > 1",
     {}},
};
}  // namespace

std::vector<OptionSpec> one_f_one_b_options() {
  return kOptions.specs();
}

Schedule generate_1f1b(const SchedulingProblem& problem) {
  const OneFOneBOptions o = kOptions.read(problem.schedule, "1f1b");
  const int p = problem.parallel.pp;
  const int m = problem.schedule.microbatches;
  std::vector<int> warmup;
  for (int s = 0; s < p; ++s)
    warmup.push_back(std::min(m, p - s - 1 + (o.overlap_moe_a2a ? 1 : 0)));
  if (!o.overlap_moe_a2a) return lower_pipeline(problem, "1f1b", one_f_one_b_orders(warmup, m));
  check_moe_overlap(problem, "1f1b");
  PipelinePrograms programs =
      one_stage_per_rank(pipeline_stage_graph(problem, "1f1b"), one_f_one_b_orders(warmup, m));
  pair_forwards_with_backwards(programs.replicas.front());
  return lower(problem, "1f1b", programs);
}

}  // namespace loom
