// loom plan: planners run on their own, without simulating (templates, cp, layout, ...).
// Each planner is one sub-subcommand in its own cmd_plan_<name>.cpp.
#include "cli/commands.hpp"

namespace loom {

namespace {

const Command kPlanCommands[] = {
    {"cp",
     "Context-parallel token distribution for a multimodal attention mask (dissertation 3.3.2)",
     attach_plan_cp},
    {"templates",
     "Oobleck pipeline templates and their instantiation for a node count (dissertation ch. 2)",
     attach_plan_templates},
    {"layout",
     "Entrain's macroscopic profiling and configuration search vs DistTrain/DIP (dissertation "
     "4.4)",
     attach_plan_layout},
};

}  // namespace

CommandRun attach_plan(CLI::App& sub) {
  sub.require_subcommand(1);
  auto runs = std::make_shared<std::vector<std::pair<CLI::App*, CommandRun>>>();
  for (const Command& c : kPlanCommands) {
    CLI::App* planner = sub.add_subcommand(c.name, c.help);
    runs->emplace_back(planner, c.attach(*planner));
  }
  return [runs]() {
    for (const auto& [planner, run] : *runs) {
      if (planner->parsed()) return run();
    }
    return 2;
  };
}

}  // namespace loom
