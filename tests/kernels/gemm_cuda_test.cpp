// cuBLAS row-major wrapper vs a CPU triple loop in double, exact fp32 mode:
// |err| <= 1e-4 + 1e-4 |ref| for sums of 96 products of values in [-1, 1).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/cuda/cublas_api.hpp"
#include "kernels/cuda/gemm.hpp"
#include "tests/kernels/cuda_test_support.hpp"
#include "tests/kernels/kernel_test_support.hpp"

namespace loom::kernels {
namespace {

using test::expect_close;
using test::random_vector;
using F = DeviceBuffer<float>;
using Vec = std::vector<float>;

constexpr int kRows = 70, kIn = 96, kOut = 50;

TEST(GemmCuda, CublasLoadsOnFirstUseWithEveryEntryPoint) {
  // No GPU needed: opening the library and naming a status are host-only. `loom` itself
  // does not link cuBLAS (kernels/cuda/cublas_api.hpp).
  const CublasApi& api = cublas();
  for (const void* entry :
       {reinterpret_cast<const void*>(api.create), reinterpret_cast<const void*>(api.destroy),
        reinterpret_cast<const void*>(api.set_stream),
        reinterpret_cast<const void*>(api.set_math_mode), reinterpret_cast<const void*>(api.sgemm),
        reinterpret_cast<const void*>(api.status_string)})
    EXPECT_NE(entry, nullptr);
  EXPECT_NE(std::string(api.status_string(CUBLAS_STATUS_NOT_INITIALIZED)).find("not initialized"),
            std::string::npos);
  EXPECT_EQ(&cublas(), &api);
}

TEST(GemmCuda, LinearForwardAndBothBackwardsMatchLoops) {
  LOOM_REQUIRE_GPU();
  const Vec x = random_vector(kRows * kIn, 1), w = random_vector(kOut * kIn, 2),
            dy = random_vector(kRows * kOut, 3);
  Vec y(kRows * kOut), dx(kRows * kIn), dw(kOut * kIn, 1.0f);  // dW accumulates onto 1
  for (int r = 0; r < kRows; ++r)
    for (int o = 0; o < kOut; ++o) {
      double acc = 0.0;
      for (int i = 0; i < kIn; ++i) acc += double(x[r * kIn + i]) * w[o * kIn + i];
      y[r * kOut + o] = static_cast<float>(acc);
    }
  for (int r = 0; r < kRows; ++r)
    for (int i = 0; i < kIn; ++i) {
      double acc = 0.0;
      for (int o = 0; o < kOut; ++o) acc += double(dy[r * kOut + o]) * w[o * kIn + i];
      dx[r * kIn + i] = static_cast<float>(acc);
    }
  for (int o = 0; o < kOut; ++o)
    for (int i = 0; i < kIn; ++i) {
      double acc = 0.0;
      for (int r = 0; r < kRows; ++r) acc += double(dy[r * kOut + o]) * x[r * kIn + i];
      dw[o * kIn + i] += static_cast<float>(acc);
    }
  Blas blas(nullptr, /*allow_tf32=*/false);
  const F d_x = F::from_host(x), d_w = F::from_host(w), d_dy = F::from_host(dy);
  F d_y(y.size()), d_dx(dx.size()), d_dw = F::from_host(Vec(dw.size(), 1.0f));
  blas.linear_forward(kRows, kIn, kOut, d_x.data(), d_w.data(), d_y.data());
  blas.linear_backward_input(kRows, kIn, kOut, d_dy.data(), d_w.data(), d_dx.data());
  blas.linear_backward_weight(kRows, kIn, kOut, d_dy.data(), d_x.data(), d_dw.data());
  expect_close(d_y.to_host(), y, 1e-4f, 1e-4f, "y = x W^T");
  expect_close(d_dx.to_host(), dx, 1e-4f, 1e-4f, "dx = dy W");
  expect_close(d_dw.to_host(), dw, 1e-4f, 1e-4f, "dW += dy^T x");
}

}  // namespace
}  // namespace loom::kernels
