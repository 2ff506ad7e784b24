#pragma once
/// Device discovery and owning device buffers for the kernels and the cuda backend.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/check.hpp"

namespace loom::kernels {

/// Number of usable CUDA devices; 0 when there is no driver or no device. (Without
/// libcuda.so.1, cudaGetDeviceCount returns cudaErrorInsufficientDriver, not 0 devices.)
int cuda_device_count();

/// Name and compute capability of device `index`, e.g. "NVIDIA H200 (sm_90)".
std::string cuda_device_name(int index);

/// An owning array of n T in device memory (cudaMalloc / cudaFree); move-only.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t n) : size_(n) {
    if (n > 0) LOOM_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&data_), n * sizeof(T)));
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept { swap(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    DeviceBuffer(std::move(other)).swap(*this);
    return *this;
  }
  ~DeviceBuffer() {
    if (data_ != nullptr) cudaFree(data_);  // destructor: nothing to report to
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::size_t bytes() const { return size_ * sizeof(T); }

  /// Copies host -> device (sizes must match) / device -> host, synchronously.
  static DeviceBuffer from_host(const std::vector<T>& host) {
    DeviceBuffer out(host.size());
    if (!host.empty())
      LOOM_CUDA_CHECK(cudaMemcpy(out.data_, host.data(), out.bytes(), cudaMemcpyHostToDevice));
    return out;
  }
  std::vector<T> to_host() const {
    std::vector<T> host(size_);
    if (size_ > 0) LOOM_CUDA_CHECK(cudaMemcpy(host.data(), data_, bytes(), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  void swap(DeviceBuffer& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
  }
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace loom::kernels
