#pragma once
/// The one option of the looped schedulers (looped-bfs, interleaved-zb): how many stages
/// each rank holds, stage s on rank s mod pp (interleaved-1f1b declares its own, with the
/// microbatch grouping it also takes).
#include "schedulers/scheduler_options.hpp"

namespace loom {

struct LoopedOptions {
  int chunks = 1;
};

const OptionSet<LoopedOptions>& looped_options();

}  // namespace loom
