// CUDA elementwise kernels vs their CPU references. fp32 with fast intrinsics and a
// different reduction order: |err| <= 1e-5 + 1e-4 |ref| for elementwise outputs,
// 1e-4 + 1e-3 |ref| for row and column reductions over up to 1000 terms.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/cuda/elementwise.hpp"
#include "kernels/reference/elementwise_ref.hpp"
#include "tests/kernels/cuda_test_support.hpp"
#include "tests/kernels/kernel_test_support.hpp"

namespace loom::kernels {
namespace {

using test::expect_close;
using test::random_vector;
using F = DeviceBuffer<float>;
using Vec = std::vector<float>;

constexpr int kRows = 1000, kCols = 300;  // not multiples of the block sizes
constexpr float kEps = 1e-5f;

TEST(ElementwiseCuda, ActivationsMatchTheReference) {
  LOOM_REQUIRE_GPU();
  const Vec x = random_vector(kRows * kCols, 1), bias = random_vector(kCols, 2),
            dy = random_vector(kRows * kCols, 3), gate_up = random_vector(kRows * 2 * kCols, 4);
  Vec y(x.size()), dx(x.size()), sy(x.size()), dgu(gate_up.size());
  bias_gelu_forward_ref(kRows, kCols, x.data(), bias.data(), y.data());
  bias_gelu_backward_ref(kRows, kCols, x.data(), bias.data(), dy.data(), dx.data());
  swiglu_forward_ref(kRows, kCols, gate_up.data(), sy.data());
  swiglu_backward_ref(kRows, kCols, gate_up.data(), dy.data(), dgu.data());
  const F d_x = F::from_host(x), d_bias = F::from_host(bias), d_dy = F::from_host(dy),
          d_gu = F::from_host(gate_up);
  F d_y(y.size()), d_dx(dx.size()), d_sy(sy.size()), d_dgu(dgu.size());
  bias_gelu_forward(kRows, kCols, d_x.data(), d_bias.data(), d_y.data(), nullptr);
  bias_gelu_backward(kRows, kCols, d_x.data(), d_bias.data(), d_dy.data(), d_dx.data(), nullptr);
  swiglu_forward(kRows, kCols, d_gu.data(), d_sy.data(), nullptr);
  swiglu_backward(kRows, kCols, d_gu.data(), d_dy.data(), d_dgu.data(), nullptr);
  expect_close(d_y.to_host(), y, 1e-5f, 1e-4f, "gelu y");
  expect_close(d_dx.to_host(), dx, 1e-5f, 1e-4f, "gelu dx");
  expect_close(d_sy.to_host(), sy, 1e-5f, 1e-4f, "swiglu y");
  expect_close(d_dgu.to_host(), dgu, 1e-5f, 1e-4f, "swiglu d_gate_up");
}

TEST(ElementwiseCuda, NormsMatchTheReference) {
  LOOM_REQUIRE_GPU();
  const Vec x = random_vector(kRows * kCols, 5), w = random_vector(kCols, 6),
            b = random_vector(kCols, 7), dy = random_vector(kRows * kCols, 8);
  Vec y(x.size()), rstd(kRows), dx(x.size()), dw(kCols, 0.5f), db(kCols, 0.25f), mean(kRows);
  const F d_x = F::from_host(x), d_w = F::from_host(w), d_b = F::from_host(b),
          d_dy = F::from_host(dy);
  F d_y(y.size()), d_rstd(kRows), d_mean(kRows), d_dx(dx.size());
  F d_dw = F::from_host(dw), d_db = F::from_host(db);  // accumulation starts from non-zero

  rmsnorm_forward_ref(kRows, kCols, x.data(), w.data(), kEps, y.data(), rstd.data());
  rmsnorm_backward_input_ref(kRows, kCols, x.data(), w.data(), rstd.data(), dy.data(), dx.data());
  rmsnorm_backward_weight_ref(kRows, kCols, x.data(), rstd.data(), dy.data(), dw.data());
  rmsnorm_forward(kRows, kCols, d_x.data(), d_w.data(), kEps, d_y.data(), d_rstd.data(), nullptr);
  rmsnorm_backward_input(kRows, kCols, d_x.data(), d_w.data(), d_rstd.data(), d_dy.data(),
                         d_dx.data(), nullptr);
  rmsnorm_backward_weight(kRows, kCols, d_x.data(), d_rstd.data(), d_dy.data(), d_dw.data(),
                          nullptr);
  expect_close(d_y.to_host(), y, 1e-4f, 1e-3f, "rmsnorm y");
  expect_close(d_dx.to_host(), dx, 1e-4f, 1e-3f, "rmsnorm dx");
  expect_close(d_dw.to_host(), dw, 1e-4f, 1e-3f, "rmsnorm dweight");

  Vec lw(kCols, 0.0f), lb(kCols, 0.0f);
  F d_lw = F::from_host(lw), d_lb = F::from_host(lb);
  layernorm_forward_ref(kRows, kCols, x.data(), w.data(), b.data(), kEps, y.data(), mean.data(),
                        rstd.data());
  layernorm_backward_input_ref(kRows, kCols, x.data(), w.data(), mean.data(), rstd.data(),
                               dy.data(), dx.data());
  layernorm_backward_weight_ref(kRows, kCols, x.data(), mean.data(), rstd.data(), dy.data(),
                                lw.data(), lb.data());
  layernorm_forward(kRows, kCols, d_x.data(), d_w.data(), d_b.data(), kEps, d_y.data(),
                    d_mean.data(), d_rstd.data(), nullptr);
  layernorm_backward_input(kRows, kCols, d_x.data(), d_w.data(), d_mean.data(), d_rstd.data(),
                           d_dy.data(), d_dx.data(), nullptr);
  layernorm_backward_weight(kRows, kCols, d_x.data(), d_mean.data(), d_rstd.data(), d_dy.data(),
                            d_lw.data(), d_lb.data(), nullptr);
  expect_close(d_y.to_host(), y, 1e-4f, 1e-3f, "layernorm y");
  expect_close(d_dx.to_host(), dx, 1e-4f, 1e-3f, "layernorm dx");
  expect_close(d_lw.to_host(), lw, 1e-4f, 1e-3f, "layernorm dweight");
  expect_close(d_lb.to_host(), lb, 1e-4f, 1e-3f, "layernorm dbias");
}

TEST(ElementwiseCuda, ResidualBiasAndBiasGradient) {
  LOOM_REQUIRE_GPU();
  const Vec a = random_vector(kRows * kCols, 9), b = random_vector(kRows * kCols, 10),
            bias = random_vector(kCols, 11);
  Vec sum(a.size()), biased = a, db(kCols, 1.0f);
  residual_add_ref(static_cast<std::int64_t>(a.size()), a.data(), b.data(), sum.data());
  add_bias_ref(kRows, kCols, biased.data(), bias.data());
  bias_grad_ref(kRows, kCols, b.data(), db.data());
  const F d_a = F::from_host(a), d_b = F::from_host(b), d_bias = F::from_host(bias);
  F d_sum(sum.size()), d_biased = F::from_host(a), d_db = F::from_host(Vec(kCols, 1.0f));
  residual_add(static_cast<std::int64_t>(a.size()), d_a.data(), d_b.data(), d_sum.data(), nullptr);
  add_bias(kRows, kCols, d_biased.data(), d_bias.data(), nullptr);
  bias_grad(kRows, kCols, d_b.data(), d_db.data(), nullptr);
  expect_close(d_sum.to_host(), sum, 0.0f, 0.0f, "residual");
  expect_close(d_biased.to_host(), biased, 0.0f, 0.0f, "add_bias");
  expect_close(d_db.to_host(), db, 1e-4f, 1e-3f, "bias_grad");
}

}  // namespace
}  // namespace loom::kernels
