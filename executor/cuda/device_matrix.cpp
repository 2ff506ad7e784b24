#include "executor/cuda/device_matrix.hpp"

#include <utility>

#include "kernels/cuda/check.hpp"

namespace loom::exec::cuda {

DeviceMatrix::DeviceMatrix(int rows, int cols, cudaStream_t stream)
    : rows_(rows), cols_(cols), stream_(stream) {
  if (size() > 0)
    LOOM_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&data_), bytes(), stream));
}

DeviceMatrix::~DeviceMatrix() {
  release();
}

DeviceMatrix::DeviceMatrix(DeviceMatrix&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      rows_(std::exchange(other.rows_, 0)),
      cols_(std::exchange(other.cols_, 0)),
      stream_(other.stream_) {}

DeviceMatrix& DeviceMatrix::operator=(DeviceMatrix&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    rows_ = std::exchange(other.rows_, 0);
    cols_ = std::exchange(other.cols_, 0);
    stream_ = other.stream_;
  }
  return *this;
}

void DeviceMatrix::release() noexcept {
  if (data_ != nullptr) cudaFreeAsync(data_, stream_);  // nothing to report to from here
  data_ = nullptr;
}

DeviceMatrix DeviceMatrix::zeros(int rows, int cols, cudaStream_t stream) {
  DeviceMatrix m(rows, cols, stream);
  if (!m.empty()) LOOM_CUDA_CHECK(cudaMemsetAsync(m.data_, 0, m.bytes(), stream));
  return m;
}

DeviceMatrix DeviceMatrix::upload(int rows, int cols, const std::vector<float>& host,
                                  cudaStream_t stream) {
  DeviceMatrix m(rows, cols, stream);
  if (!m.empty())
    LOOM_CUDA_CHECK(
        cudaMemcpyAsync(m.data_, host.data(), m.bytes(), cudaMemcpyHostToDevice, stream));
  return m;
}

DeviceMatrix DeviceMatrix::clone(cudaStream_t stream) const {
  DeviceMatrix m(rows_, cols_, stream);
  if (!m.empty())
    LOOM_CUDA_CHECK(cudaMemcpyAsync(m.data_, data_, bytes(), cudaMemcpyDeviceToDevice, stream));
  return m;
}

std::vector<float> DeviceMatrix::download() const {
  std::vector<float> host(size());
  if (!host.empty()) {
    LOOM_CUDA_CHECK(cudaStreamSynchronize(stream_));
    LOOM_CUDA_CHECK(cudaMemcpy(host.data(), data_, bytes(), cudaMemcpyDeviceToHost));
  }
  return host;
}

}  // namespace loom::exec::cuda
