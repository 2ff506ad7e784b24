#pragma once
/// The `host` backend: one thread per rank, the in-process Transport, real float math on
/// the CPU (HostModelState). Always built, so CI runs every schedule for real.
#include <memory>

#include "executor/backend.hpp"

namespace loom::exec {

std::unique_ptr<Executor> make_host_executor();

}  // namespace loom::exec
