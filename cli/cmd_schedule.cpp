// `loom schedule export CONFIG --format loom|pytorch-csv|chakra --out PATH`: plans the
// config's schedule (validated as for `loom sim`) and writes it to a file that `loom sim
// CONFIG --schedule PATH` runs back, that a person can edit and diff, that PyTorch
// pipelining loads (`_load_csv`), or to a folder of Chakra traces that ASTRA-sim runs.
// Formats: docs/schedule-ir.md.
#include <iostream>

#include "app/chakra_trace.hpp"
#include "app/schedule_import.hpp"
#include "app/study.hpp"
#include "cli/commands.hpp"
#include "cli/output_dir.hpp"
#include "cli/staging.hpp"
#include "core/errors.hpp"
#include "core/io.hpp"

namespace loom {
namespace {

struct ExportOptions {
  std::string config;
  std::vector<std::string> overrides;
  std::string format = "loom";
  bool comms = false;
  std::string out;
  bool force = false;
};

void report(const Study& study, const std::filesystem::path& written, const std::string& format) {
  std::cout << "wrote " << written.string() << ": " << study.schedule.scheduler << ", "
            << study.schedule.num_ranks() << " ranks, " << study.schedule.num_ops()
            << " operations (" << format << ")\n";
}

/// One .et per rank and comm_group.json into a folder of their own, published whole.
int export_chakra_folder(const Study& study, const ExportOptions& o) {
  OutputDir out(o.out, o.force);
  write_chakra(export_chakra(study.schedule, study.config.model, study.problem.samples),
               out.file(""));
  out.commit();
  report(study, out.destination(), o.format);
  return 0;
}

int run_export(const ExportOptions& o) {
  if (o.comms && o.format != "pytorch-csv")
    throw InputError("--comms: only with --format pytorch-csv (the " + o.format +
                     " format always holds every op)");
  const auto study = prepare_study(o.config, o.overrides);
  if (o.format == "chakra") return export_chakra_folder(*study, o);
  const ScheduleFormat format =
      o.format == "loom" ? ScheduleFormat::kLoom : ScheduleFormat::kPytorchCsv;
  const std::string text = export_schedule(study->schedule, format, o.comms);
  StagedFile staged(o.out, format == ScheduleFormat::kLoom ? "schedule.txt" : "schedule.csv");
  std::ofstream out = open_for_write(staged.path());
  out << text;
  finish_write(out, staged.path());
  staged.commit();
  report(*study, staged.destination(), o.format);
  return 0;
}

}  // namespace

CommandRun attach_schedule(CLI::App& sub) {
  sub.require_subcommand(1);
  auto o = std::make_shared<ExportOptions>();
  CLI::App* export_cmd = sub.add_subcommand(
      "export",
      "Plan a config's schedule and write it to a file (loom IR, PyTorch CSV) or a folder "
      "(Chakra traces)");
  export_cmd->add_option("CONFIG", o->config, "TOML config (see configs/examples/)")
      ->required()
      ->check(CLI::ExistingFile);
  export_cmd->add_option("--set", o->overrides,
                         "Override a config key: section.key=value (repeatable), "
                         "e.g. --set schedule.name=zb-h1");
  export_cmd
      ->add_option("--format", o->format,
                   "loom (the full IR, read back by loom sim --schedule), pytorch-csv "
                   "(PyTorch pipelining's action CSV, one row per rank) or chakra (a folder: "
                   "MLCommons Chakra traces loom.RANK.et and comm_group.json, for ASTRA-sim; "
                   "loom sim --schedule reads the folder back)")
      ->check(CLI::IsMember({"loom", "pytorch-csv", "chakra"}));
  export_cmd->add_flag(
      "--comms", o->comms,
      "pytorch-csv: also write SEND_F/RECV_F/SEND_B/RECV_B and REDUCE_GRAD actions");
  export_cmd->add_option("--out", o->out, "File to write (chakra: the folder)")->required();
  export_cmd->add_flag("--force", o->force,
                       "chakra: replace a folder that holds an earlier Loom export");
  return [o, export_cmd]() { return export_cmd->parsed() ? run_export(*o) : 2; };
}

}  // namespace loom
