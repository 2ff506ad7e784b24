#include "app/backends.hpp"

#include "core/errors.hpp"
#include "core/spelling.hpp"

namespace loom {

Backend evaluator_backend();  // app/backends/evaluator.cpp
Backend simgrid_backend();    // app/backends/simgrid.cpp

const std::vector<Backend>& backends() {
  static const std::vector<Backend> kBackends = {evaluator_backend(), simgrid_backend()};
  return kBackends;
}

std::vector<std::string> backend_names() {
  std::vector<std::string> names;
  for (const Backend& b : backends()) names.push_back(b.name);
  return names;
}

namespace {

/// "a, b or c"
std::string or_list(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i)
    out += (i == 0 ? "" : i + 1 == items.size() ? " or " : ", ") + items[i];
  return out;
}

}  // namespace

std::string backend_name_list(bool quoted) {
  std::vector<std::string> names = backend_names();
  if (quoted)
    for (std::string& n : names) n = "\"" + n + "\"";
  return or_list(names);
}

std::string backend_help() {
  std::vector<std::string> items;
  for (const Backend& b : backends()) items.push_back(b.name + " (" + b.summary + ")");
  return or_list(items);
}

const Backend& find_backend(const std::string& name) {
  for (const Backend& b : backends())
    if (b.name == name) return b;
  std::vector<std::string> names;
  for (const Backend& b : backends()) names.push_back(b.name);
  throw InputError("unknown simulation backend '" + name + "'" + did_you_mean(name, names) +
                   " (valid: " + backend_name_list() + ")");
}

BackendRun simulate(const Study& study, const std::string& backend, const BackendOptions& options) {
  return find_backend(backend).run(study.schedule, study.config.cluster, study.config.sim, options);
}

BackendRun simulate(const Study& study, const BackendOptions& options) {
  return simulate(study, study.config.sim.backend, options);
}

}  // namespace loom
