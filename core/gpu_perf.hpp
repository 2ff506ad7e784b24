#pragma once
/// Kernel timing on one GPU, from its datasheet and stated achievable fractions:
///   GEMM   max(compute, memory): compute = waves x (tile FLOPs at the tile's efficiency)
///          over the SMs, for the cuBLAS tile shape that finishes first; memory = operand
///          and result bytes over achievable bandwidth.
///   memory-bound kernels (norms, element-wise, softmax): bytes / achievable bandwidth.
///   every kernel: + a launch cost.
/// Constants and their sources are in gpu_perf.cpp. Nothing here is fitted to a
/// validation run.
#include "core/cluster.hpp"

namespace loom {

/// A FlashAttention-style backward recomputes the scores: 2.5x the forward's FLOPs (Dao
/// 2023, FlashAttention-2, §4.1).
inline constexpr double kAttentionBackwardFlops = 2.5;

/// A GEMM C[m x n] = A[m x k] B[k x n], `batch` independent copies (batched GEMM).
struct GemmShape {
  double m = 0;
  double n = 0;
  double k = 0;
  double batch = 1;
  double flops() const { return 2 * m * n * k * batch; }
};

class GpuPerformance {
 public:
  /// `dtype_bytes`: element size of the operands (1: FP8, 2: fp16/bf16, 4: TF32);
  /// `output_bytes` of the result (0: the operands'; an FP8 GEMM writes bf16).
  GpuPerformance(const GpuSpec& gpu, int dtype_bytes, int output_bytes = 0);

  double gemm_seconds(const GemmShape& shape) const;
  /// Efficiency the GEMM reaches: FLOPs / (time x peak). Below 1; rises with size.
  double gemm_efficiency(const GemmShape& shape) const;
  double memory_seconds(double bytes) const;
  /// A fused attention kernel (GpuSpec::flash_*_fraction) of `flops`, forward or backward, spread
  /// over `blocks` independent (head, query-block) tiles.
  double flash_attention_seconds(double flops, double blocks, bool backward) const;

  double peak() const { return peak_; }
  const GpuSpec& spec() const { return gpu_; }
  double achievable_bandwidth() const;

 private:
  GpuSpec gpu_;
  int dtype_bytes_;
  int output_bytes_;
  double peak_;
  double gemm_fraction_;  ///< GpuSpec::gemm_fraction for this dtype
};

/// A memory-bound kernel moving `bytes` on `gpu` (GpuPerformance::memory_seconds without
/// a dtype: it needs no compute peak).
double memory_bound_seconds(const GpuSpec& gpu, double bytes);

/// NCCL ring all-reduce of `bytes` over `n` GPUs on one link type: 2(n-1)/n x bytes at
/// the achieved bus bandwidth, plus 2(n-1) link latencies. 0 when n <= 1.
double ring_allreduce_seconds(double bytes, int n, const LinkSpec& link);

/// One GPU sending `bytes` to a peer while receiving as many from another (a ring step):
/// the bytes at the same achieved fraction of the link's bandwidth, plus one latency.
double ring_step_seconds(double bytes, const LinkSpec& link);

}  // namespace loom
