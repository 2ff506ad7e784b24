#pragma once
/// GEMMs of the transformer block through cuBLAS, in Loom's row-major convention.
///
/// A linear layer y = x W^T (x: rows x in, W: out x in, row-major, as PyTorch stores it)
/// needs three products, one per launch so split backward is real:
///   forward          y  = x W^T                       linear_forward
///   backward input   dx = dy W                        linear_backward_input   (I / Bd)
///   backward weight  dW += dy^T x                     linear_backward_weight  (W / Bw)
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

namespace loom::kernels {

enum class Trans : bool { kNo = false, kYes = true };

/// Owns a cuBLAS handle bound to one stream. fp32 storage; with allow_tf32 the products
/// use TF32 tensor cores (10-bit mantissa inputs, fp32 accumulation), else exact fp32.
class Blas {
 public:
  Blas(cudaStream_t stream, bool allow_tf32);
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;

  /// Row-major C (m x n, ldc) = alpha op(A) op(B) + beta C, with op(A) m x k and op(B)
  /// k x n; lda/ldb are the row strides of A and B as stored.
  void gemm(Trans ta, Trans tb, int m, int n, int k, float alpha, const float* a, int lda,
            const float* b, int ldb, float beta, float* c, int ldc);

  void linear_forward(int rows, int in, int out, const float* x, const float* w, float* y);
  void linear_backward_input(int rows, int in, int out, const float* dy, const float* w, float* dx);
  void linear_backward_weight(int rows, int in, int out, const float* dy, const float* x,
                              float* dw);

 private:
  cublasHandle_t handle_ = nullptr;
};

}  // namespace loom::kernels
