#pragma once
/// Contention-free evaluator: list scheduling of a Schedule over its dependency DAG.
/// Each rank runs its program in order; a transfer takes transfer_time() of its route as
/// if it were alone on the links; collectives run their ring steps the same way. With
/// free links it agrees with the SimGrid backend; with shared links SimGrid is slower.
/// Planners call it in their inner loops: it has no dependency on SimGrid.
#include "core/cluster.hpp"
#include "core/schedule.hpp"
#include "core/timeline.hpp"

namespace loom {

struct Matching;

/// Throws InfeasibleError naming the blocked operations if the schedule deadlocks.
/// `matching`: match_operations(schedule), where the caller holds it (else made here).
Timeline evaluate(const Schedule& schedule, const Cluster& cluster,
                  const Matching* matching = nullptr);

}  // namespace loom
