#pragma once
/// Checked CUDA and cuBLAS calls: every call's status is tested and a failure throws
/// CudaError naming the call, the error and the source line (never ignored, never printed).
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace loom::kernels {

class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void throw_cuda_error(const std::string& what, const std::string& detail,
                                          const char* file, int line) {
  throw CudaError(what + " failed: " + detail + " (" + file + ":" + std::to_string(line) + ")");
}

inline void check_cuda(cudaError_t status, const char* what, const char* file, int line) {
  if (status != cudaSuccess)
    throw_cuda_error(what,
                     std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status),
                     file, line);
}

/// cuBLAS's name for a status (kernels/cuda/cublas_api.cpp: the library is loaded lazily).
const char* cublas_status_string(cublasStatus_t status);

inline void check_cublas(cublasStatus_t status, const char* what, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw_cuda_error(what, cublas_status_string(status), file, line);
}

}  // namespace loom::kernels

#define LOOM_CUDA_CHECK(call) ::loom::kernels::check_cuda((call), #call, __FILE__, __LINE__)
#define LOOM_CUBLAS_CHECK(call) ::loom::kernels::check_cublas((call), #call, __FILE__, __LINE__)
/// After a kernel launch: launch-configuration errors surface here, not at the next call.
#define LOOM_CUDA_CHECK_LAUNCH(name) \
  ::loom::kernels::check_cuda(cudaGetLastError(), name, __FILE__, __LINE__)
