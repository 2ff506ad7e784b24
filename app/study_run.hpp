#pragma once
/// One study's iteration time, in this process (evaluator) or in a forked child (SimGrid:
/// one Engine per process). Used by `loom replay`'s simulation timer and `loom validate`.
#include <string>
#include <vector>

namespace loom {

/// Plans `config` with `overrides` and runs it on `backend` (app/backends.hpp; in a
/// forked child if it runs once per process).
/// Rethrows the child's InputError / InfeasibleError as such.
double iteration_time(const std::string& config, const std::vector<std::string>& overrides,
                      const std::string& backend);

}  // namespace loom
