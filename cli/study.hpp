#pragma once
/// One what-if study, from config to a validated schedule: the part of the data flow
/// (config -> planner/scheduler -> Schedule IR) that every subcommand shares.
#include <memory>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/cost_model.hpp"
#include "schedulers/scheduler.hpp"

namespace loom {

struct Study {
  Config config;
  std::unique_ptr<CostModel> cost;
  SchedulingProblem problem;
  Schedule schedule;
};

/// Loads the config and builds the cost model, workload and scheduling problem; the
/// schedule stays empty (for a schedule read from a file: cli/schedule_import.hpp).
std::unique_ptr<Study> load_study(const std::string& config_path,
                                  const std::vector<std::string>& overrides);

/// Loads the config, builds the cost model and workload, runs the configured scheduler,
/// validates the schedule and checks it fits GPU memory. Throws InputError /
/// InfeasibleError with messages that name the file and key.
std::unique_ptr<Study> prepare_study(const std::string& config_path,
                                     const std::vector<std::string>& overrides);

/// Re-plans `study` with another partition view and returns the evaluator's iteration
/// time (what the partition choice alone is worth).
double evaluate_with_view(const Study& study, PartitionView view);

}  // namespace loom
