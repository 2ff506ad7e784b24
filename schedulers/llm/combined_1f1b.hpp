#pragma once
/// Megatron-Core's combined 1F1B (`--overlap-moe-expert-parallel-comm`; PyTorch pipelining's
/// OVERLAP_F_B action): in the steady state of 1F1B (and interleaved 1F1B) each forward and
/// the backward of another microbatch that follows it run as one overlapped pair, so the
/// expert-parallel all-to-alls of each half run under the other's compute
/// (lowering/expert_parallel.hpp, weave_overlapped_pair). The option `overlap_moe_a2a` of
/// `1f1b` and `interleaved-1f1b` turns it on; it needs parallel.ep > 1 (there is nothing to
/// hide otherwise).
#include <string>

#include "schedulers/lowering/lowering.hpp"

namespace loom {

/// Joins every forward compute followed by a full backward of another microbatch into an
/// overlapped pair (Join::kOverlap), walking each rank's order once.
void pair_forwards_with_backwards(RankOrders& orders);

/// InputError naming `[schedule.<scheduler>] overlap_moe_a2a` when the problem has no
/// expert parallelism to overlap.
void check_moe_overlap(const SchedulingProblem& problem, const std::string& scheduler);

}  // namespace loom
