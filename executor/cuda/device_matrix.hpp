#pragma once
/// Device tensors of the cuda backend: a row-major float matrix in stream-ordered memory
/// (cudaMallocAsync / cudaFreeAsync), so allocating an activation never synchronises the
/// device (plain cudaMalloc would, and would distort every timing).
///
/// A matrix is freed on the stream of its last use: `use_on(stream)` moves that stream
/// (a sent buffer is freed on its channel's stream, after the send).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace loom::exec::cuda {

class DeviceMatrix {
 public:
  DeviceMatrix() = default;
  /// rows x cols, uninitialised, allocated in stream order on `stream`.
  DeviceMatrix(int rows, int cols, cudaStream_t stream);
  ~DeviceMatrix();
  DeviceMatrix(DeviceMatrix&& other) noexcept;
  DeviceMatrix& operator=(DeviceMatrix&& other) noexcept;
  DeviceMatrix(const DeviceMatrix&) = delete;
  DeviceMatrix& operator=(const DeviceMatrix&) = delete;

  static DeviceMatrix zeros(int rows, int cols, cudaStream_t stream);
  /// Uploads a host matrix (asynchronously; `host` must outlive the copy: callers
  /// synchronise before freeing it).
  static DeviceMatrix upload(int rows, int cols, const std::vector<float>& host,
                             cudaStream_t stream);
  /// A device-to-device copy on `stream`.
  DeviceMatrix clone(cudaStream_t stream) const;
  /// Synchronous download (for gradients at the end of a run).
  std::vector<float> download() const;

  void use_on(cudaStream_t stream) { stream_ = stream; }
  cudaStream_t stream() const { return stream_; }
  float* data() { return data_; }
  const float* data() const { return data_; }
  int rows() const { return rows_; }
  int cols() const { return cols_; }
  std::size_t size() const { return static_cast<std::size_t>(rows_) * cols_; }
  std::size_t bytes() const { return size() * sizeof(float); }
  bool empty() const { return size() == 0; }

 private:
  void release() noexcept;
  float* data_ = nullptr;
  int rows_ = 0, cols_ = 0;
  cudaStream_t stream_ = nullptr;
};

/// Rows of one microbatch on one edge: packed samples, `lengths` rows each.
struct DeviceActivation {
  DeviceMatrix x;
  std::vector<int> lengths;
};

/// Parameters, saved tensors or gradients of a layer, by name (executor/layer_math.hpp's).
using DeviceTensors = std::map<std::string, DeviceMatrix>;

}  // namespace loom::exec::cuda
