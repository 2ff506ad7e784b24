// Megatron-LM interleaved 1F1B (Narayanan et al. SC'21 §2.2, Figure 4; Megatron-LM
// core/pipeline_parallel/schedules.py, forward_backward_pipelining_with_interleaving): each
// rank holds v model chunks, so a microbatch crosses p x v virtual stages and the pipeline
// fills v times faster. The rank runs microbatches in groups of N (Megatron's
// microbatch_group_size_per_vp_stage, default p): forwards sweep chunk 0 for the group's
// microbatches, chunk 1 for the same ones, ..., then the next group; the last group takes
// whatever is left (between p and N microbatches, Megatron's rule). Backwards follow the
// same table with the chunks reversed. Bubble time over ideal time drops from (p-1)/m to
// (p-1)/(v m), at the cost of v times more point-to-point messages and a longer warm-up.
//
// Megatron's schedule table (get_schedule_table) maps virtual microbatch k to (microbatch,
// chunk); its docstring's example, p = 2, N = 3, m = 5, v = 2:
//   k           0 1 2 3 4 5 6 7 8 9
//   microbatch  0 1 2 0 1 2 3 4 3 4
//   chunk       0 0 0 1 1 1 0 0 1 1
// Rank r runs min(m v, 2(p-r-1) + (v-1) N) warm-up forwards (get_pp_rank_microbatches),
// then forward k = warm-up + j and backward k = j for each step j, then the rest of the
// backwards. For that example (rank 0 holds stages 0 and 2, rank 1 holds 1 and 3):
//   rank 0: 0F0 0F1 0F2 2F0 2F1 | 2F2 2B0 0F3 2B1 0F4 2B2 2F3 0B0 2F4 0B1 | 0B2 2B3 2B4 0B3 0B4
//   rank 1: 1F0 1F1 1F2 | 3F0 3B0 3F1 3B1 3F2 3B2 1F3 1B0 1F4 1B1 3F3 1B2 3F4 3B3 | 3B4 1B3 1B4
// With N = p and m a multiple of p this is the original schedule (microbatch
// (k div pv) p + k mod p, chunk (k mod pv) div p).
#include <algorithm>
#include <cstdlib>
#include <string>

#include "core/errors.hpp"
#include "schedulers/llm/combined_1f1b.hpp"
#include "schedulers/llm/zero_bubble.hpp"
#include "schedulers/scheduler_options.hpp"

namespace loom {

namespace {

std::string str(int x) {
  return std::to_string(x);
}

/// Megatron's rule for the last group: empty or at least p microbatches.
bool last_group_ok(int p, int m, int group) {
  return m % group == 0 || m % group >= p;
}

}  // namespace

std::string interleaved_group_error(int p, int m, int group) {
  if (m < p) {
    return "schedule.microbatches: interleaved-1f1b needs at least parallel.pp = " + str(p) +
           " microbatches (Megatron: one group of microbatch_group_size >= pp microbatches "
           "must fit), got " +
           str(m) + "; use schedule.microbatches = " + str(p);
  }
  if (group < p || group > m) {
    return "schedule.interleaved-1f1b.microbatch_group_size: must be from parallel.pp = " + str(p) +
           " to schedule.microbatches = " + str(m) + " (Megatron's range), got " + str(group) +
           "; use " + str(std::clamp(group, p, m));
  }
  if (!last_group_ok(p, m, group)) {
    // The nearest counts whose last group is empty or holds >= p: m - last (a multiple of
    // N) or m + p - last (a last group of exactly p); and the nearest valid group size
    // (m itself always is).
    const int last = m % group, down = m - last, up = m + p - last;
    int nearest_group = m;
    for (int g = p; g <= m; ++g) {
      if (last_group_ok(p, m, g) && std::abs(g - group) < std::abs(nearest_group - group))
        nearest_group = g;
    }
    return "schedule.microbatches: interleaved-1f1b runs microbatches in groups of "
           "schedule.interleaved-1f1b.microbatch_group_size = " +
           str(group) + " (default parallel.pp = " + str(p) + "); " + str(m) +
           " leaves a last group of " + str(last) + " < parallel.pp = " + str(p) +
           ", which Megatron rejects (dependency bubbles); use schedule.microbatches = " +
           str(last <= p - last ? down : up) + " (or " + str(last <= p - last ? up : down) +
           "), or schedule.interleaved-1f1b.microbatch_group_size = " + str(nearest_group);
  }
  return "";
}

std::vector<VirtualMicrobatch> megatron_schedule_table(int m, int v, int group) {
  std::vector<VirtualMicrobatch> table;
  for (int first = 0; first < m; first += group) {
    // The last group takes what is left (Megatron: first + N >= m).
    const int end = first + group >= m ? m : first + group;
    for (int c = 0; c < v; ++c) {
      for (int j = first; j < end; ++j) table.push_back({.microbatch = j, .chunk = c});
    }
  }
  return table;
}

RankOrders interleaved_1f1b_orders(int p, int m, int v, int group) {
  if (group == 0) group = p;
  if (const std::string error = interleaved_group_error(p, m, group); !error.empty())
    throw InputError(error);
  const int total = m * v;  // virtual microbatches
  // Virtual microbatch k; the backward of k runs the mirrored chunk v-1-c.
  return virtual_orders(p, m, v, group, [&](int r, const auto& push) {
    const int warmup = std::min(total, 2 * (p - r - 1) + (v - 1) * group);
    for (int k = 0; k < warmup; ++k) push(k, Pass::kF);
    for (int j = 0; j < total - warmup; ++j) {
      push(warmup + j, Pass::kF);
      push(j, Pass::kB);
    }
    for (int j = std::max(0, total - warmup); j < total; ++j) push(j, Pass::kB);
  });
}

namespace {

struct InterleavedOptions {
  int chunks = 1;
  int microbatch_group_size = 0;
  bool overlap_moe_a2a = false;
};

const OptionSet<InterleavedOptions> kOptions{
    {"chunks", &InterleavedOptions::chunks,
     "model chunks (virtual stages) per pipeline rank, v: chunk c of rank r is stage c*pp+r "
     "(Megatron's virtual_pipeline_model_parallel_size); 1 is plain 1F1B",
     at_least(1).degenerates_at(1,
                                "one chunk per rank runs 1F1B's order; set chunks >= 2 "
                                "(e.g. --schedulers 'interleaved-1f1b:chunks=2') to compare "
                                "interleaving")},
    {"microbatch_group_size", &InterleavedOptions::microbatch_group_size,
     "microbatches per group that sweeps every chunk before the next group, N in "
     "[pp, microbatches] (Megatron's microbatch_group_size_per_vp_stage); 0 = parallel.pp",
     at_least(0)},
    {"overlap_moe_a2a",
     &InterleavedOptions::overlap_moe_a2a,
     "run each steady-state forward with the backward of another microbatch that follows it "
     "as one overlapped pair, hiding each half's expert-parallel all-to-alls under the "
     "other's compute (Megatron-Core's combined 1F1B); needs parallel.ep > 1",
     {}},
};

}  // namespace

std::vector<OptionSpec> interleaved_1f1b_options() {
  return kOptions.specs();
}

Schedule generate_interleaved_1f1b(const SchedulingProblem& problem) {
  const InterleavedOptions o = kOptions.read(problem.schedule, "interleaved-1f1b");
  const int p = problem.parallel.pp;
  RankOrders orders =
      interleaved_1f1b_orders(p, problem.schedule.microbatches, o.chunks, o.microbatch_group_size);
  if (o.overlap_moe_a2a) {
    check_moe_overlap(problem, "interleaved-1f1b");
    pair_forwards_with_backwards(orders);
  }
  return lower_virtual_pipeline(problem, "interleaved-1f1b", orders, o.chunks);
}

}  // namespace loom
