#include "core/errors.hpp"
#include "schedulers/scheduler.hpp"

namespace loom {

Schedule generate_gpipe(const SchedulingProblem& problem);
Schedule generate_1f1b(const SchedulingProblem& problem);

const std::vector<SchedulerInfo>& scheduler_registry() {
  static const std::vector<SchedulerInfo> kSchedulers = {
      {"gpipe", "GPipe: all forwards, then all backwards (peak activations: m microbatches)",
       generate_gpipe},
      {"1f1b", "1F1B: stage s warms up with p-s-1 forwards, then one forward, one backward",
       generate_1f1b},
  };
  return kSchedulers;
}

const SchedulerInfo& find_scheduler(const std::string& name) {
  for (const SchedulerInfo& info : scheduler_registry()) {
    if (name == info.name) return info;
  }
  std::string valid;
  for (const SchedulerInfo& info : scheduler_registry())
    valid += (valid.empty() ? "" : ", ") + std::string(info.name);
  throw InputError("schedule.name: unknown scheduler '" + name + "' (valid: " + valid + ")");
}

}  // namespace loom
