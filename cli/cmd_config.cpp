#include <iostream>
#include <memory>

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

namespace {

/// `loom schedulers NAME`: the summary, then each option with its default, accepted
/// values and help, as a config writes it.
void print_scheduler(const SchedulerInfo& s) {
  std::cout << s.name << "\n  " << s.summary << "\n";
  const std::vector<OptionSpec> specs = s.option_specs();
  if (specs.empty()) {
    std::cout << "options: none (shared keys only: [schedule] name, microbatches, "
                 "microbatch_size, partition_view, stage_layers)\n";
    return;
  }
  std::cout << "options (write them under [schedule." << s.name << "], or --set schedule." << s.name
            << ".KEY=VALUE):\n";
  for (const OptionSpec& o : specs) {
    std::cout << "  " << o.key << " = " << o.default_text << "   (" << o.type_text() << ")\n"
              << "      " << o.help << "\n";
    std::cout << "      earlier releases: schedule." << o.legacy_key() << " (deprecated)\n";
  }
}

}  // namespace

CommandRun attach_schedulers(CLI::App& sub) {
  auto name = std::make_shared<std::string>();
  sub.add_option("NAME", *name,
                 "A scheduler: print its summary and its options ([schedule.NAME] keys) with "
                 "their defaults");
  return [name]() {
    if (!name->empty()) {
      print_scheduler(find_scheduler(*name));
      return 0;
    }
    for (const SchedulerInfo& s : scheduler_registry())
      std::cout << s.name << "\t" << s.summary << "\n";
    return 0;
  };
}

}  // namespace loom
