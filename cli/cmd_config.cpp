#include <iostream>

#include "app/study.hpp"
#include "cli/commands.hpp"

namespace loom {

CommandRun attach_config(CLI::App& sub) {
  struct Options {
    std::string config;
    std::vector<std::string> overrides;
    bool dump = true;  // the only action so far; the flag is accepted for explicitness
  };
  auto o = std::make_shared<Options>();
  sub.add_option("CONFIG", o->config, "TOML config file")->required();
  sub.add_option("--set", o->overrides, "Override a key: section.key=value (repeatable)");
  sub.add_flag("--dump", o->dump, "Print the resolved configuration (the default action)");
  return [o]() {
    // Building the whole study also checks the scheduler name, partition and memory.
    const auto study = prepare_study(o->config, o->overrides);
    std::cout << study->config.resolved_toml;
    std::cerr << "loom: " << o->config << " is valid (" << study->schedule.num_ranks() << " ranks, "
              << study->schedule.num_ops() << " operations with " << study->config.schedule.name
              << ")\n";
    return 0;
  };
}

CommandRun attach_schedulers(CLI::App& /*sub*/) {
  return []() {
    for (const SchedulerInfo& s : scheduler_registry())
      std::cout << s.name << "\t" << s.summary << "\n";
    return 0;
  };
}

}  // namespace loom
