#pragma once
/// Subcommands: each file attaches its options to a CLI11 subcommand and returns the
/// function that runs it; main() only dispatches this table.
#include <CLI/CLI.hpp>
#include <functional>

namespace loom {

using CommandRun = std::function<int()>;

struct Command {
  const char* name;
  const char* help;
  CommandRun (*attach)(CLI::App& sub);
};

CommandRun attach_sim(CLI::App& sub);
CommandRun attach_config(CLI::App& sub);
CommandRun attach_schedulers(CLI::App& sub);
CommandRun attach_plan(CLI::App& sub);
CommandRun attach_plan_cp(CLI::App& sub);         // cli/cmd_plan_cp.cpp
CommandRun attach_trace(CLI::App& sub);           // cli/cmd_trace.cpp
CommandRun attach_plan_templates(CLI::App& sub);  // cli/cmd_plan_templates.cpp
CommandRun attach_replay(CLI::App& sub);          // cli/cmd_replay.cpp
CommandRun attach_exec(CLI::App& sub);
CommandRun attach_profile(CLI::App& sub);
CommandRun attach_compare(CLI::App& sub);
CommandRun attach_plan_layout(CLI::App& sub);  // cli/cmd_plan_layout.cpp
CommandRun attach_schedule(CLI::App& sub);     // cli/cmd_schedule.cpp
CommandRun attach_sweep(CLI::App& sub);        // cli/cmd_sweep.cpp
CommandRun attach_validate(CLI::App& sub);     // cli/cmd_validate.cpp
CommandRun attach_cost(CLI::App& sub);         // cli/cmd_cost.cpp
CommandRun attach_collective(CLI::App& sub);   // cli/cmd_collective.cpp

}  // namespace loom
