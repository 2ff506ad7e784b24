#include "schedulers/llm/looped_options.hpp"

namespace loom {

const OptionSet<LoopedOptions>& looped_options() {
  static const OptionSet<LoopedOptions> kOptions{
      {"chunks", &LoopedOptions::chunks,
       "model chunks (stages) per pipeline rank, v: stage s on rank s mod pp (the looped "
       "placement of interleaved 1F1B)",
       at_least(1)},
  };
  return kOptions;
}

Schedule lower_looped(const SchedulingProblem& problem, const char* scheduler_name,
                      RankOrders (*orders)(int p, int m, int v)) {
  const int v = looped_options().read(problem.schedule, scheduler_name).chunks;
  return lower_virtual_pipeline(problem, scheduler_name,
                                orders(problem.parallel.pp, problem.schedule.microbatches, v), v);
}

std::vector<OptionSpec> looped_bfs_options() {
  return looped_options().specs();
}
std::vector<OptionSpec> interleaved_zb_options() {
  return looped_options().specs();
}

}  // namespace loom
