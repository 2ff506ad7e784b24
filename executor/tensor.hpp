#pragma once
/// A small row-major float matrix for the host backend, and the few kernels the
/// transformer-block math needs (GEMM in three transpositions, RMSNorm, activations).
/// Deliberately plain loops: the host backend is a numerical reference and a CI vehicle,
/// not a fast CPU runtime.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace loom::exec {

struct Matrix {
  int rows = 0;
  int cols = 0;
  std::vector<float> data;

  Matrix() = default;
  Matrix(int r, int c) : rows(r), cols(c), data(static_cast<std::size_t>(r) * c, 0.0F) {}
  float* row(int r) { return data.data() + static_cast<std::size_t>(r) * cols; }
  const float* row(int r) const { return data.data() + static_cast<std::size_t>(r) * cols; }
  float& at(int r, int c) { return row(r)[c]; }
  float at(int r, int c) const { return row(r)[c]; }
  std::size_t size() const { return data.size(); }
};

/// A layer's parameters (or their gradients), by name. Norm gains are 1 x hidden.
using LayerTensors = std::map<std::string, Matrix>;

/// C (+)= A B       A [m,k], B [k,n]
void matmul(const Matrix& a, const Matrix& b, Matrix& c, bool accumulate = false);
/// C (+)= A B^T     A [m,k], B [n,k]
void matmul_bt(const Matrix& a, const Matrix& b, Matrix& c, bool accumulate = false);
/// C (+)= A^T B     A [k,m], B [k,n]   (weight gradients: X^T dY)
void matmul_at(const Matrix& a, const Matrix& b, Matrix& c, bool accumulate = false);

void add_inplace(Matrix& a, const Matrix& b);  ///< a += b (same shape)

/// RMSNorm over each row: y = x / rms(x) * gain; returns the normalised x (x / rms)
/// in `xhat` and 1/rms per row in `inv_rms` for the backward.
void rmsnorm_forward(const Matrix& x, const std::vector<float>& gain, Matrix& y, Matrix& xhat,
                     std::vector<float>& inv_rms);
/// dx of RMSNorm given dy (gradient w.r.t. the gained output).
void rmsnorm_backward_input(const Matrix& dy, const Matrix& xhat, const std::vector<float>& gain,
                            const std::vector<float>& inv_rms, Matrix& dx);

float silu(float x);
float silu_grad(float x);
float gelu(float x);  ///< tanh approximation
float gelu_grad(float x);

/// Flushes denormal floats to zero in the calling thread (x86 FTZ/DAZ; no-op elsewhere).
/// Softmax probabilities near underflow times small gradients are denormal, and denormal
/// arithmetic is ~100x slower on x86: without this, attention backward times jump
/// erratically with sequence length and no quadratic cost model fits them. Every host
/// thread that computes (ranks, the reference, the profiler) sets it, so numerics agree.
void enable_flush_to_zero();

/// Deterministic uniform value in [-1, 1) from a 64-bit key (splitmix64): parameters and
/// synthetic data are pure functions of (seed, what, index), independent of thread order.
float hash_uniform(std::uint64_t key);
std::uint64_t hash_combine(std::uint64_t a, std::uint64_t b);

}  // namespace loom::exec
