#include "executor/tensor.hpp"

#include <cassert>
#include <cmath>
#include <utility>
#if defined(__SSE__)
#include <pmmintrin.h>
#include <xmmintrin.h>
#endif

namespace loom::exec {

namespace {

/// C[m,n] += A[m,k] B[k,n], all row-major and contiguous. Four rows of C at a time share
/// each loaded row of B; the inner loop is contiguous and vectorises. Every C element
/// still sums its k products in ascending k, so results do not depend on the blocking.
/// UBSan's index checks stay out of it (they stop the loop vectorising; its indices are in
/// bounds by the shapes its callers assert, and ASan still checks every access).
#if defined(__clang__)
__attribute__((no_sanitize("undefined")))
#endif
void gemm_accumulate(int m, int n, int k, const float* a, const float* b, float* c) {
  int i = 0;
  for (; i + 4 <= m; i += 4) {
    const float* a0 = a + static_cast<std::size_t>(i) * k;
    const float *a1 = a0 + k, *a2 = a1 + k, *a3 = a2 + k;
    float* __restrict c0 = c + static_cast<std::size_t>(i) * n;
    float* __restrict c1 = c0 + n;
    float* __restrict c2 = c1 + n;
    float* __restrict c3 = c2 + n;
    for (int p = 0; p < k; ++p) {
      const float* __restrict bp = b + static_cast<std::size_t>(p) * n;
      const float x0 = a0[p], x1 = a1[p], x2 = a2[p], x3 = a3[p];
      for (int j = 0; j < n; ++j) {
        const float y = bp[j];
        c0[j] += x0 * y;
        c1[j] += x1 * y;
        c2[j] += x2 * y;
        c3[j] += x3 * y;
      }
    }
  }
  for (; i < m; ++i) {
    const float* ai = a + static_cast<std::size_t>(i) * k;
    float* __restrict ci = c + static_cast<std::size_t>(i) * n;
    for (int p = 0; p < k; ++p) {
      const float* __restrict bp = b + static_cast<std::size_t>(p) * n;
      const float x = ai[p];
      for (int j = 0; j < n; ++j) ci[j] += x * bp[j];
    }
  }
}

Matrix transpose(const Matrix& x) {
  Matrix t(x.cols, x.rows);
  for (int r = 0; r < x.rows; ++r) {
    const float* xr = x.row(r);
    for (int c = 0; c < x.cols; ++c) t.data[static_cast<std::size_t>(c) * x.rows + r] = xr[c];
  }
  return t;
}

}  // namespace

// The three products run one kernel: a transposed operand is copied once (O(k n) against
// the product's O(m k n)) so the inner loop stays contiguous.
void matmul(const Matrix& a, const Matrix& b, Matrix& c, bool accumulate) {
  assert(a.cols == b.rows);
  if (!accumulate) c = Matrix(a.rows, b.cols);
  assert(c.rows == a.rows && c.cols == b.cols);
  gemm_accumulate(a.rows, b.cols, a.cols, a.data.data(), b.data.data(), c.data.data());
}

void matmul_bt(const Matrix& a, const Matrix& b, Matrix& c, bool accumulate) {
  assert(a.cols == b.cols);
  // Each dot product is summed from zero, then added to C, as C += (A B^T) reads.
  Matrix product(a.rows, b.rows);
  gemm_accumulate(a.rows, b.rows, a.cols, a.data.data(), transpose(b).data.data(),
                  product.data.data());
  if (!accumulate) {
    c = std::move(product);
    return;
  }
  assert(c.rows == a.rows && c.cols == b.rows);
  add_inplace(c, product);
}

void matmul_at(const Matrix& a, const Matrix& b, Matrix& c, bool accumulate) {
  assert(a.rows == b.rows);
  if (!accumulate) c = Matrix(a.cols, b.cols);
  assert(c.rows == a.cols && c.cols == b.cols);
  gemm_accumulate(a.cols, b.cols, a.rows, transpose(a).data.data(), b.data.data(), c.data.data());
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
