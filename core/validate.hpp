#pragma once
/// Schedule validation, run on every schedule before a backend sees it.
///
/// Rejects (InfeasibleError, naming the offending operation and showing its neighbourhood
/// in the rank's program):
///   - a send or receive with no partner, collectives not reached by all members
///   - a cycle in the happens-before graph (program order + transfers + collectives): the
///     schedule would deadlock
///   - a (replica, microbatch, layer) whose forward runs other than exactly once, or whose
///     backward runs other than exactly once (one B, or one I and one W)
///   - a sample that is in no microbatch or in more than one
///     (redundant computes, Compute::redundant, are extra work and count for neither)
///   - a broken overlapped pair (Compute::overlapped): its forward computes must be directly
///     followed by the backward (B) computes of another microbatch, both flagged
///   - a compute op whose input is neither produced earlier on its rank nor received
///     earlier (forward needs its producers' activations, backward its own forward and
///     its consumers' input gradients, W its I)
#include "core/cluster.hpp"
#include "core/model.hpp"
#include "core/schedule.hpp"
#include "core/timeline.hpp"

namespace loom {

void validate(const Schedule& schedule, const Model& model);

/// Every rank's GPUs [gpu, gpu + tp) exist, lie in one node (tensor parallelism runs on
/// the intra-node links) and belong to no other rank; throws InfeasibleError naming the
/// rank. Both backends assume it (the evaluator and SimGrid model no GPU sharing).
void check_placement(const Schedule& schedule, const Cluster& cluster);

/// The memory settings of the run (parallel.* and cost.* keys), so that an out-of-memory
/// message suggests only the fixes it has not applied.
struct MemoryLevers {
  int tp = 1;
  int dp = 1;
  bool sequence_parallel = false;
  bool distributed_optimizer = false;
  bool fsdp = false;
  Recompute recompute = Recompute::kNone;
  RecomputeModules recompute_modules = {};
  bool kernel_level = false;    ///< selective recompute needs the kernel-level cost model
  bool flash_attention = true;  ///< core_attn recompute then saves nothing
  bool moe = false;             ///< the model has MoE layers (moe_act, layernorm save memory)
  bool fp8 = false;             ///< cost.fp8 is on (moe_act then saves nothing)
};

/// Static memory plus peak live activations of every rank must fit its GPU; throws
/// InfeasibleError naming the first rank that does not, with the numbers and the keys
/// that would shrink its largest part.
void check_fits_memory(const Schedule& schedule, double gpu_memory_bytes,
                       const MemoryLevers& levers = {});

/// The happens-before graph alone (Boost.Graph); throws on a cycle. Exposed for tests.
void check_acyclic(const Schedule& schedule);

}  // namespace loom
