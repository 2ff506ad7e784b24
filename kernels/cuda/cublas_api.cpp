#include "kernels/cuda/cublas_api.hpp"

#include <dlfcn.h>

#include <string>

#include "kernels/cuda/check.hpp"

namespace loom::kernels {
namespace {

/// LOOM_CUBLAS_PATH: the library CMake found; LOOM_CUBLAS_SONAME: the name to look for
/// where the binary runs with another CUDA install (bench/gpu/validate.sh's wheels).
void* open_library() {
  for (const char* name : {LOOM_CUBLAS_PATH, LOOM_CUBLAS_SONAME}) {
    if (void* library = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return library;
  }
  const char* reason = dlerror();
  throw CudaError(std::string("loading cuBLAS (") + LOOM_CUBLAS_PATH + ", " + LOOM_CUBLAS_SONAME +
                  ") failed: " + (reason ? reason : "unknown reason"));
}

template <typename Function>
void bind(void* library, const char* name, Function& function) {
  function = reinterpret_cast<Function>(dlsym(library, name));
  if (function == nullptr)
    throw CudaError(std::string("cuBLAS (") + LOOM_CUBLAS_SONAME + ") has no " + name);
}

CublasApi load() {
  void* library = open_library();  // kept open for the process
  CublasApi api;
  bind(library, "cublasCreate_v2", api.create);
  bind(library, "cublasDestroy_v2", api.destroy);
  bind(library, "cublasSetStream_v2", api.set_stream);
  bind(library, "cublasSetMathMode", api.set_math_mode);
  bind(library, "cublasSgemm_v2", api.sgemm);
  bind(library, "cublasGetStatusString", api.status_string);
  return api;
}

}  // namespace

const CublasApi& cublas() {
  static const CublasApi api = load();  // thread-safe; a failed load is retried next call
  return api;
}

const char* cublas_status_string(cublasStatus_t status) {
  return cublas().status_string(status);
}

}  // namespace loom::kernels
