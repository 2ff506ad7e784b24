#include "app/study_run.hpp"

#include <cstring>

#include "app/backends.hpp"
#include "app/child_run.hpp"
#include "app/study.hpp"

namespace loom {
namespace {

double run_here(const std::string& config, const std::vector<std::string>& overrides,
                const std::string& backend) {
  const auto study = prepare_study(config, overrides, Folding::kAllowed);
  return simulate(*study, backend).timeline.iteration_time_s();
}

}  // namespace

double iteration_time(const std::string& config, const std::vector<std::string>& overrides,
                      const std::string& backend) {
  if (!find_backend(backend).once_per_process) return run_here(config, overrides, backend);
  const std::string bytes = run_in_child([&] {
    const double t = run_here(config, overrides, backend);
    return std::string(reinterpret_cast<const char*>(&t), sizeof t);
  });
  double t = 0;
  std::memcpy(&t, bytes.data(), sizeof t);
  return t;
}

}  // namespace loom
