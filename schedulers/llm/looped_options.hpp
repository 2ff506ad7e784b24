#pragma once
/// The one option of the looped schedulers (looped-bfs, interleaved-zb): how many stages
/// each rank holds, stage s on rank s mod pp (interleaved-1f1b declares its own, with the
/// microbatch grouping it also takes).
#include "schedulers/lowering/lowering.hpp"
#include "schedulers/scheduler_options.hpp"

namespace loom {

struct LoopedOptions {
  int chunks = 1;
};

const OptionSet<LoopedOptions>& looped_options();

/// A looped scheduler's schedule: `orders(pp, microbatches, v)` for v = its chunks option,
/// lowered on the looped placement (stage s on rank s mod pp).
Schedule lower_looped(const SchedulingProblem& problem, const char* scheduler_name,
                      RankOrders (*orders)(int p, int m, int v));

}  // namespace loom
