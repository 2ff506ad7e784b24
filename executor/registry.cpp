// The only place that knows which executor backends exist (STYLE.md point 9).
#include "core/errors.hpp"
#include "executor/backend.hpp"
#include "executor/host_backend.hpp"

namespace loom::exec {

std::vector<std::string> executor_names() {
#ifdef LOOM_HAVE_CUDA_EXECUTOR
  return {"host", "cuda"};
#else
  return {"host"};
#endif
}

std::unique_ptr<Executor> make_executor(const std::string& name) {
  if (name == "host") return make_host_executor();
#ifdef LOOM_HAVE_CUDA_EXECUTOR
  if (name == "cuda") return make_cuda_executor();
#endif
  if (name == "cuda") {
    throw InputError(
        "--backend cuda: this loom was built without CUDA (no nvcc found at configure time); "
        "use --backend host, or rebuild with nvcc on PATH");
  }
  std::string valid;
  for (const std::string& n : executor_names()) valid += (valid.empty() ? "" : ", ") + n;
  throw InputError("--backend: unknown executor backend '" + name + "' (valid: " + valid + ")");
}

}  // namespace loom::exec
