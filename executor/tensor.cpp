#include "executor/tensor.hpp"

#include <cassert>
#include <cmath>
#if defined(__SSE__)
#include <pmmintrin.h>
#include <xmmintrin.h>
#endif

namespace loom::exec {

void matmul(const Matrix& a, const Matrix& b, Matrix& c, bool accumulate) {
  assert(a.cols == b.rows);
  if (!accumulate) c = Matrix(a.rows, b.cols);
  for (int i = 0; i < a.rows; ++i) {
    float* ci = c.row(i);
    const float* ai = a.row(i);
    for (int k = 0; k < a.cols; ++k) {  // i-k-j: the inner loop is contiguous in B and C
      const float aik = ai[k];
      const float* bk = b.row(k);
      for (int j = 0; j < b.cols; ++j) ci[j] += aik * bk[j];
    }
  }
}

void matmul_bt(const Matrix& a, const Matrix& b, Matrix& c, bool accumulate) {
  assert(a.cols == b.cols);
  if (!accumulate) c = Matrix(a.rows, b.rows);
  for (int i = 0; i < a.rows; ++i) {
    const float* ai = a.row(i);
    float* ci = c.row(i);
    for (int j = 0; j < b.rows; ++j) {
      const float* bj = b.row(j);
      float s = 0;
      for (int k = 0; k < a.cols; ++k) s += ai[k] * bj[k];
      ci[j] += s;
    }
  }
}

void matmul_at(const Matrix& a, const Matrix& b, Matrix& c, bool accumulate) {
  assert(a.rows == b.rows);
  if (!accumulate) c = Matrix(a.cols, b.cols);
  for (int k = 0; k < a.rows; ++k) {
    const float* ak = a.row(k);
    const float* bk = b.row(k);
    for (int i = 0; i < a.cols; ++i) {
      const float aki = ak[i];
      float* ci = c.row(i);
      for (int j = 0; j < b.cols; ++j) ci[j] += aki * bk[j];
    }
  }
}

void add_inplace(Matrix& a, const Matrix& b) {
  assert(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) a.data[i] += b.data[i];
}

void rmsnorm_forward(const Matrix& x, const std::vector<float>& gain, Matrix& y, Matrix& xhat,
                     std::vector<float>& inv_rms) {
  constexpr float kEps = 1e-6F;
  y = Matrix(x.rows, x.cols);
  xhat = Matrix(x.rows, x.cols);
  inv_rms.clear();
  const float* g = gain.data();  // one per column
  for (int r = 0; r < x.rows; ++r) {
    double sq = 0;
    for (int c = 0; c < x.cols; ++c) sq += static_cast<double>(x.at(r, c)) * x.at(r, c);
    const float inv = static_cast<float>(1.0 / std::sqrt(sq / x.cols + kEps));
    inv_rms.push_back(inv);  // row r's
    for (int c = 0; c < x.cols; ++c) {
      xhat.at(r, c) = x.at(r, c) * inv;
      y.at(r, c) = xhat.at(r, c) * g[c];
    }
  }
}

void rmsnorm_backward_input(const Matrix& dy, const Matrix& xhat, const std::vector<float>& gain,
                            const std::vector<float>& inv_rms, Matrix& dx) {
  // y = g * x * r, r = (mean(x^2) + eps)^-1/2:  dx = r * (g dy - xhat * mean(g dy * xhat)).
  dx = Matrix(dy.rows, dy.cols);
  const float* g = gain.data();           // one per column
  const float* row_inv = inv_rms.data();  // one per row
  for (int r = 0; r < dy.rows; ++r) {
    double dot = 0;
    for (int c = 0; c < dy.cols; ++c)
      dot += static_cast<double>(dy.at(r, c)) * g[c] * xhat.at(r, c);
    const float mean = static_cast<float>(dot / dy.cols);
    const float inv = row_inv[r];
    for (int c = 0; c < dy.cols; ++c) {
      dx.at(r, c) = inv * (dy.at(r, c) * g[c] - xhat.at(r, c) * mean);
    }
  }
}

void enable_flush_to_zero() {
#if defined(__SSE__)
  _MM_SET_FLUSH_ZERO_MODE(_MM_FLUSH_ZERO_ON);
  _MM_SET_DENORMALS_ZERO_MODE(_MM_DENORMALS_ZERO_ON);
#endif
}

float silu(float x) {
  return x / (1.0F + std::exp(-x));
}
float silu_grad(float x) {
  const float s = 1.0F / (1.0F + std::exp(-x));
  return s * (1.0F + x * (1.0F - s));
}

float gelu(float x) {
  constexpr float kC = 0.7978845608F;  // sqrt(2/pi)
  return 0.5F * x * (1.0F + std::tanh(kC * (x + 0.044715F * x * x * x)));
}
float gelu_grad(float x) {
  constexpr float kC = 0.7978845608F;
  const float u = kC * (x + 0.044715F * x * x * x);
  const float t = std::tanh(u);
  return 0.5F * (1.0F + t) + 0.5F * x * (1.0F - t * t) * kC * (1.0F + 3 * 0.044715F * x * x);
}

std::uint64_t hash_combine(std::uint64_t a, std::uint64_t b) {
  std::uint64_t z = a ^ (b + 0x9e3779b97f4a7c15ULL + (a << 6) + (a >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;  // splitmix64 finaliser
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

float hash_uniform(std::uint64_t key) {
  const std::uint64_t h = hash_combine(key, 0x5851f42d4c957f2dULL);
  return static_cast<float>(static_cast<double>(h >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

}  // namespace loom::exec
