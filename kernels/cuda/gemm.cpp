#include "kernels/cuda/gemm.hpp"

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/cublas_api.hpp"

namespace loom::kernels {

Blas::Blas(cudaStream_t stream, bool allow_tf32) {
  const CublasApi& api = cublas();
  LOOM_CUBLAS_CHECK(api.create(&handle_));
  LOOM_CUBLAS_CHECK(api.set_stream(handle_, stream));
  LOOM_CUBLAS_CHECK(
      api.set_math_mode(handle_, allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
}

Blas::~Blas() {
  if (handle_ != nullptr) cublas().destroy(handle_);  // destructor: nothing to report to
}

void Blas::gemm(Trans ta, Trans tb, int m, int n, int k, float alpha, const float* a, int lda,
                const float* b, int ldb, float beta, float* c, int ldc) {
  // cuBLAS is column-major: a row-major matrix is its transpose there, so compute
  // C^T = op(B)^T op(A)^T, i.e. swap the operands and keep each one's transpose flag.
  const auto op = [](Trans t) { return t == Trans::kYes ? CUBLAS_OP_T : CUBLAS_OP_N; };
  LOOM_CUBLAS_CHECK(
      cublas().sgemm(handle_, op(tb), op(ta), n, m, k, &alpha, b, ldb, a, lda, &beta, c, ldc));
}

void Blas::linear_forward(int rows, int in, int out, const float* x, const float* w, float* y) {
  gemm(Trans::kNo, Trans::kYes, rows, out, in, 1.0f, x, in, w, in, 0.0f, y, out);
}

void Blas::linear_backward_input(int rows, int in, int out, const float* dy, const float* w,
                                 float* dx) {
  gemm(Trans::kNo, Trans::kNo, rows, in, out, 1.0f, dy, out, w, in, 0.0f, dx, in);
}

void Blas::linear_backward_weight(int rows, int in, int out, const float* dy, const float* x,
                                  float* dw) {
  // Accumulate (beta = 1): gradients of several microbatches add up.
  gemm(Trans::kYes, Trans::kNo, out, in, rows, 1.0f, dy, out, x, in, 1.0f, dw, in);
}

}  // namespace loom::kernels
