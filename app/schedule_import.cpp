// Loading a schedule file and holding it to the rules a planned schedule meets (see
// schedule_import.hpp). A file is user input, so a schedule that deadlocks or misses a
// dependency is an input error (exit 2) rather than an infeasible request (exit 3).
#include "app/schedule_import.hpp"

#include <fstream>
#include <sstream>

#include "app/chakra_trace.hpp"
#include "app/pytorch_csv.hpp"
#include "core/errors.hpp"
#include "core/io.hpp"
#include "core/schedule_stall.hpp"
#include "core/schedule_text.hpp"
#include "core/validate.hpp"

namespace loom {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in = open_for_read(path, "schedule file");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void check_modules(const Schedule& s, const Model& model, const std::string& path) {
  PerModule<std::string> names;
  for (const Module& m : model.modules()) names.push_back(m.name);
  if (s.module_names == names) return;
  auto list = [](const PerModule<std::string>& v) {
    std::string out;
    for (const std::string& n : v) out += (out.empty() ? "" : " ") + n;
    return out;
  };
  throw InputError(path + ": the schedule's modules (" + list(s.module_names) +
                   ") are not the config's model (" + list(names) +
                   "): export it from the same config");
}

/// The rules a planned schedule meets, for one read from `path`.
void check_loaded(const Study& study, const Schedule& schedule, const OpOrigins& origins,
                  const std::string& path) {
  check_modules(schedule, study.config.model, path);
  try {
    check_placement(schedule, study.config.cluster);
    check_runs_to_completion(schedule, &origins);
    validate(schedule, study.config.model);
  } catch (const InfeasibleError& e) {
    throw InputError(path + ": " + e.what());
  }
  try {
    check_fits_memory(schedule, study.config.cluster.gpu.memory_bytes, memory_levers(study.config));
  } catch (const InfeasibleError& e) {
    throw InfeasibleError(path + ": " + e.what());
  }
}

}  // namespace

std::string export_schedule(const Schedule& schedule, ScheduleFormat format, bool comms) {
  return format == ScheduleFormat::kLoom ? format_schedule(schedule)
                                         : format_pytorch_csv(schedule, comms);
}

Schedule load_schedule_file(const Study& study, const std::string& path, PytorchNaming naming) {
  if (is_chakra_folder(path)) return load_chakra(study, read_chakra_folder(path), path);
  return load_schedule_text(study, read_file(path), path, naming);
}

Schedule load_chakra(const Study& study, const ChakraTrace& trace, const std::string& source) {
  OpOrigins origins;
  Schedule schedule = decode_chakra(trace, &origins);
  check_loaded(study, schedule, origins, source);
  return schedule;
}

Schedule load_schedule_text(const Study& study, std::string_view text, const std::string& path,
                            PytorchNaming naming) {
  Schedule schedule;
  OpOrigins origins;  // the file's line and step of each op, for the deadlock report
  if (is_loom_schedule_text(text)) {
    schedule = parse_schedule(text, path, &origins);
  } else {
    try {
      schedule = import_pytorch_csv(study.problem, text, path, &origins, naming);
    } catch (const InputError& e) {
      throw InputError(std::string(e.what()) +
                       "\n  (read as PyTorch's action CSV: the file does not start with '" +
                       std::string(kScheduleTextMagic) + "')");
    }
  }
  check_loaded(study, schedule, origins, path);
  return schedule;
}

}  // namespace loom
