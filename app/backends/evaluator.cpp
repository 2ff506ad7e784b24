// The contention-free evaluator (core/evaluator.hpp): every op as early as its
// dependencies allow, each transfer at full link bandwidth. Fast, in this process.
#include "core/evaluator.hpp"

#include "app/backends.hpp"

namespace loom {

Backend evaluator_backend() {
  Backend b;
  b.name = "evaluator";
  b.summary = "contention-free, fast";
  b.label = "the evaluator";
  b.run = [](const Schedule& schedule, const Cluster& cluster, const SimConfig&,
             const BackendOptions& options) {
    return BackendRun{evaluate(schedule, cluster, options.matching), schedule.num_ops()};
  };
  return b;
}

}  // namespace loom
