// `_loom`, the extension under the Python package `loom` (python/loom/__init__.py holds
// the user-facing API). It runs the same code paths as the CLI: prepare_study, the
// backends, sim_report (metrics.json's content) and the timeline and memory CSV writers,
// so a result here is the CLI's, number for number. Everything crosses as text (JSON, CSV,
// TOML): the package turns it into dicts and DataFrames.
//
// The GIL is released while planning and simulating. A backend that runs once per process
// (SimGrid) runs in a forked child, as `loom replay` runs it; while waiting the parent checks
// Python's signals every 100 ms, so Ctrl-C kills the child and raises KeyboardInterrupt.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "app/backends.hpp"
#include "app/child_run.hpp"
#include "app/study.hpp"
#include "app/sweep/point.hpp"
#include "app/sweep/results.hpp"
#include "app/sweep/runner.hpp"
#include "app/sweep/study_file.hpp"
#include "cli/run_output.hpp"
#include "core/errors.hpp"
#include "core/schedule_text.hpp"
#include "core/timeline.hpp"

namespace py = pybind11;

namespace loom {
namespace {

/// A config from Python: a path, or a TOML document (a dict the package wrote as TOML)
/// with the name it goes by in messages.
ConfigSource config_source(const std::string& path, const std::optional<std::string>& document) {
  return document ? ConfigSource(path, *document) : ConfigSource(path);
}

/// Thrown by the parent's poll when Python has a pending signal (its error is set).
struct PythonSignal {};

/// Runs `work` with the GIL released: here, or in a forked child when `fresh_process`
/// (SimGrid's one simulation per process). Python's exception is raised again if a signal
/// interrupted the wait.
std::string run_released(bool fresh_process, const std::function<std::string()>& work) {
  try {
    py::gil_scoped_release release;
    if (!fresh_process) return work();
    return run_in_child(work, [] {
      py::gil_scoped_acquire acquire;
      if (PyErr_CheckSignals() != 0) throw PythonSignal{};
    });
  } catch (const PythonSignal&) {
    throw py::error_already_set();  // the GIL is held again; the signal's exception is set
  }
}

/// The resolved configuration as TOML text (`loom config --dump`).
std::string resolved_config(const std::string& path, const std::optional<std::string>& document,
                            const std::vector<std::string>& overrides) {
  const ConfigSource source = config_source(path, document);
  return run_released(
      false, [&] { return prepare_study(source, overrides, Folding::kOff)->config.resolved_toml; });
}

/// One `loom sim` run: metrics.json, timeline.csv and memory.csv as the CLI writes them,
/// and the schedule as IR text (`loom schedule export --format loom`), in one JSON object
/// of strings.
std::string simulate_run(const ConfigSource& source, const std::vector<std::string>& overrides) {
  const auto study = prepare_study(source, overrides, Folding::kAllowed);
  const BackendRun run = simulate(*study);
  const SimReport report =
      sim_report(*study, run.timeline, study->config.sim.backend, partition_views(*study, false));
  std::ostringstream timeline, memory;
  write_timeline_csv(timeline, study->schedule, run.timeline);
  write_memory_csv(memory, memory_over_time(study->schedule, run.timeline));
  const nlohmann::json texts = {{"metrics", report.file.dump(2)},
                                {"timeline", timeline.str()},
                                {"memory", memory.str()},
                                {"schedule", format_schedule(study->schedule)}};
  return texts.dump();
}

std::string sim(const std::string& path, const std::optional<std::string>& document,
                const std::vector<std::string>& overrides) {
  const ConfigSource source = config_source(path, document);
  // The backend is known once the config is read: read it before choosing where to run.
  const std::string backend =
      run_released(false, [&] { return load_study_config(source, overrides).sim.backend; });
  return run_released(find_backend(backend).once_per_process,
                      [&] { return simulate_run(source, overrides); });
}

/// A sweep study expanded: its columns, backend and each point's config, overrides, axis
/// cells and config hash, checked and resolved as `loom sweep` does before running anything.
py::dict sweep_plan(const std::string& study_path) {
  const sweep::StudyFile study = sweep::parse_study(study_path);
  sweep::check_axes(study);
  std::vector<sweep::Point> points = sweep::expand(study);
  py::list planned;
  for (const sweep::ResolvedPoint& rp : sweep::resolve_points(study, points, {})) {
    py::dict point;
    point["index"] = rp.point->index;
    point["config"] = study.bases[rp.point->base];
    point["overrides"] = rp.point->overrides;
    point["cells"] = rp.point->cells;
    point["hash"] = rp.hash;
    planned.append(point);
  }
  py::dict plan;
  plan["columns"] = sweep::all_columns(sweep::axis_columns(study));
  plan["fresh_process"] = find_backend(study.backend).once_per_process;
  plan["points"] = planned;
  return plan;
}

/// One sweep row as results.json holds it: a JSON array of its cells, typed, in the
/// columns' order.
std::string sweep_row(size_t index, const std::string& config,
                      const std::vector<std::string>& overrides,
                      const std::vector<std::string>& cells, const std::string& hash,
                      const std::vector<std::string>& columns, bool fresh_process) {
  const std::string message = run_released(
      fresh_process, [&] { return sweep::to_message(sweep::run_point(config, overrides)); });
  const std::vector<std::string> row =
      sweep::row_cells(index, cells, hash, sweep::from_message(message));
  nlohmann::json typed = nlohmann::json::array();
  for (size_t i = 0; i < row.size(); ++i) typed.push_back(sweep::json_cell(columns[i], row[i]));
  return typed.dump();
}

}  // namespace
}  // namespace loom

PYBIND11_MODULE(_loom, m) {
  using namespace loom;
  m.doc() = "Loom's extension module; use the package `loom` (import loom).";
  py::register_exception<InputError>(m, "InputError", PyExc_ValueError);
  py::register_exception<InfeasibleError>(m, "InfeasibleError", PyExc_RuntimeError);
  m.def("resolved_config", &resolved_config, py::arg("path"), py::arg("document"),
        py::arg("overrides"));
  m.def("sim", &sim, py::arg("path"), py::arg("document"), py::arg("overrides"));
  m.def("sweep_plan", &sweep_plan, py::arg("study"));
  m.def("sweep_row", &sweep_row, py::arg("index"), py::arg("config"), py::arg("overrides"),
        py::arg("cells"), py::arg("hash"), py::arg("columns"), py::arg("fresh_process"));
  m.def("schedulers", [] {
    std::vector<std::pair<std::string, std::string>> out;
    for (const SchedulerInfo& s : scheduler_registry()) out.emplace_back(s.name, s.summary);
    return out;
  });
  m.def("backends", &backend_names);
}
