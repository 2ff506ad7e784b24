// CPU references of the block's elementwise kernels: closed forms, and every backward
// (input and weight parts) against central finite differences of its forward.
#include "kernels/reference/elementwise_ref.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "kernels/activations.hpp"
#include "tests/kernels/kernel_test_support.hpp"

namespace loom::kernels {
namespace {

using test::random_vector;
using Vec = std::vector<float>;

constexpr int kRows = 3, kCols = 8;
constexpr float kEps = 1e-5f;

/// sum(f() * w): a scalar loss whose gradient w.r.t. f's output is w.
double weighted(const Vec& y, const Vec& w) {
  double acc = 0.0;
  for (size_t i = 0; i < y.size(); ++i) acc += double(y[i]) * w[i];
  return acc;
}

/// Checks grad[i] == d loss / d x[i] by central differences (h = 1e-2, |err| <= 3e-3).
void expect_gradient(Vec& x, const Vec& grad, const std::function<double()>& loss,
                     const char* what) {
  for (size_t i = 0; i < x.size(); ++i) {
    const float saved = x[i], h = 1e-2f;
    x[i] = saved + h;
    const double up = loss();
    x[i] = saved - h;
    const double down = loss();
    x[i] = saved;
    ASSERT_NEAR(grad[i], (up - down) / (2.0 * h), 3e-3) << what << "[" << i << "]";
  }
}

TEST(ActivationReference, ClosedForms) {
  EXPECT_EQ(gelu_tanh(0.0f), 0.0f);
  EXPECT_NEAR(gelu_tanh(6.0f), 6.0f, 1e-5);
  EXPECT_NEAR(gelu_tanh(-6.0f), 0.0f, 1e-5);
  EXPECT_NEAR(gelu_tanh_grad(0.0f), 0.5f, 1e-6);
  EXPECT_NEAR(silu(0.0f), 0.0f, 1e-7);
  EXPECT_NEAR(silu_grad(0.0f), 0.5f, 1e-7);
}

TEST(ElementwiseReference, BiasGeluBackward) {
  Vec x = random_vector(kRows * kCols, 1), bias = random_vector(kCols, 2);
  const Vec dy = random_vector(kRows * kCols, 3);
  Vec dx(x.size()), y(x.size());
  bias_gelu_backward_ref(kRows, kCols, x.data(), bias.data(), dy.data(), dx.data());
  Vec d_bias(kCols, 0.0f);
  bias_grad_ref(kRows, kCols, dx.data(), d_bias.data());
  const auto loss = [&] {
    bias_gelu_forward_ref(kRows, kCols, x.data(), bias.data(), y.data());
    return weighted(y, dy);
  };
  expect_gradient(x, dx, loss, "dx");
  expect_gradient(bias, d_bias, loss, "dbias");
}

TEST(ElementwiseReference, SwiGluForwardAndBackward) {
  Vec gate_up = random_vector(kRows * 2 * kCols, 4);
  const Vec dy = random_vector(kRows * kCols, 5);
  Vec y(kRows * kCols), d_gate_up(gate_up.size());
  swiglu_forward_ref(kRows, kCols, gate_up.data(), y.data());
  EXPECT_FLOAT_EQ(y[1], silu(gate_up[1]) * gate_up[kCols + 1]);
  swiglu_backward_ref(kRows, kCols, gate_up.data(), dy.data(), d_gate_up.data());
  expect_gradient(
      gate_up, d_gate_up,
      [&] {
        swiglu_forward_ref(kRows, kCols, gate_up.data(), y.data());
        return weighted(y, dy);
      },
      "d_gate_up");
}

TEST(ElementwiseReference, RmsNormHasUnitRmsAndCorrectGradients) {
  Vec x = random_vector(kRows * kCols, 6), weight = random_vector(kCols, 7);
  const Vec dy = random_vector(kRows * kCols, 8);
  Vec y(x.size()), rstd(kRows), dx(x.size()), d_weight(kCols, 0.0f);
  const Vec ones(kCols, 1.0f);
  rmsnorm_forward_ref(kRows, kCols, x.data(), ones.data(), 0.0f, y.data(), rstd.data());
  for (int r = 0; r < kRows; ++r) {
    double ss = 0.0;
    for (int c = 0; c < kCols; ++c) ss += y[r * kCols + c] * y[r * kCols + c];
    EXPECT_NEAR(ss / kCols, 1.0, 1e-5);
  }
  rmsnorm_forward_ref(kRows, kCols, x.data(), weight.data(), kEps, y.data(), rstd.data());
  rmsnorm_backward_input_ref(kRows, kCols, x.data(), weight.data(), rstd.data(), dy.data(),
                             dx.data());
  rmsnorm_backward_weight_ref(kRows, kCols, x.data(), rstd.data(), dy.data(), d_weight.data());
  Vec scratch(kRows);
  const auto loss = [&] {
    rmsnorm_forward_ref(kRows, kCols, x.data(), weight.data(), kEps, y.data(), scratch.data());
    return weighted(y, dy);
  };
  expect_gradient(x, dx, loss, "dx");
  expect_gradient(weight, d_weight, loss, "dweight");
}

TEST(ElementwiseReference, LayerNormIsStandardisedAndHasCorrectGradients) {
  Vec x = random_vector(kRows * kCols, 9), weight = random_vector(kCols, 10),
      bias = random_vector(kCols, 11);
  const Vec dy = random_vector(kRows * kCols, 12);
  Vec y(x.size()), mean(kRows), rstd(kRows), dx(x.size());
  Vec d_weight(kCols, 0.0f), d_bias(kCols, 0.0f);
  const Vec ones(kCols, 1.0f), zeros(kCols, 0.0f);
  layernorm_forward_ref(kRows, kCols, x.data(), ones.data(), zeros.data(), 0.0f, y.data(),
                        mean.data(), rstd.data());
  for (int r = 0; r < kRows; ++r) {
    double s = 0.0, ss = 0.0;
    for (int c = 0; c < kCols; ++c)
      s += y[r * kCols + c], ss += y[r * kCols + c] * y[r * kCols + c];
    EXPECT_NEAR(s / kCols, 0.0, 1e-6);
    EXPECT_NEAR(ss / kCols, 1.0, 1e-5);
  }
  layernorm_forward_ref(kRows, kCols, x.data(), weight.data(), bias.data(), kEps, y.data(),
                        mean.data(), rstd.data());
  layernorm_backward_input_ref(kRows, kCols, x.data(), weight.data(), mean.data(), rstd.data(),
                               dy.data(), dx.data());
  layernorm_backward_weight_ref(kRows, kCols, x.data(), mean.data(), rstd.data(), dy.data(),
                                d_weight.data(), d_bias.data());
  Vec m2(kRows), r2(kRows);
  const auto loss = [&] {
    layernorm_forward_ref(kRows, kCols, x.data(), weight.data(), bias.data(), kEps, y.data(),
                          m2.data(), r2.data());
    return weighted(y, dy);
  };
  expect_gradient(x, dx, loss, "dx");
  expect_gradient(weight, d_weight, loss, "dweight");
  expect_gradient(bias, d_bias, loss, "dbias");
}

TEST(ElementwiseReference, WeightGradientsAccumulateAcrossCalls) {
  // Two microbatches' W passes add up: calling twice doubles the gradient.
  const Vec dy = random_vector(kRows * kCols, 13);
  Vec once(kCols, 0.0f), twice(kCols, 0.0f);
  bias_grad_ref(kRows, kCols, dy.data(), once.data());
  bias_grad_ref(kRows, kCols, dy.data(), twice.data());
  bias_grad_ref(kRows, kCols, dy.data(), twice.data());
  for (int c = 0; c < kCols; ++c) EXPECT_FLOAT_EQ(twice[c], 2.0f * once[c]);
}

}  // namespace
}  // namespace loom::kernels
