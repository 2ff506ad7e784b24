#include "core/gpu_perf.hpp"

#include <algorithm>
#include <array>
#include <cmath>

namespace loom {
namespace {

// The fraction of the tensor-core peak a large GEMM tile sustains is the GPU's
// (GpuSpec::gemm_fraction): by default 0.80, the midpoint of the 70-90 % that large,
// well-aligned fp16 cuBLAS GEMMs reach on A100 (NVIDIA, "Matrix Multiplication Background
// User's Guide", DU-09799-001, 2023, §2.3); Hopper presets carry the fraction measured
// under sustained, power-limited clocks (core/cluster.cpp). Not tuned to any validation run.
// Achievable fraction of datasheet memory bandwidth for streaming kernels: ~80-90 % of the
// datasheet figure (Jia et al., "Dissecting the NVIDIA Volta GPU Architecture via
// Microbenchmarking", 2018: 750 of 900 GB/s on V100); the midpoint.
constexpr double kBandwidthFraction = 0.85;
// Launch plus tail of one kernel: a few microseconds (NVIDIA Technical Blog, "Getting
// Started with CUDA Graphs", 2019, kernels launched back to back on one stream); we take
// 4 us.
constexpr double kLaunchSeconds = 4e-6;
// NCCL all-reduce bus bandwidth reached on NVLink3 for large messages, ~230 GB/s of the
// link's 300 GB/s per direction (hardware.md), as a fraction of any link's bandwidth.
constexpr double kNcclBusFraction = 230.0 / 300.0;

struct Tile {
  int m;
  int n;
};
// cuBLAS's usual tensor-core tiles (NVIDIA, "Matrix Multiplication Background User's
// Guide", §2.3 "Typical Tile Dimensions in cuBLAS and Performance").
constexpr std::array<Tile, 8> kTiles = {
    {{256, 128}, {128, 256}, {128, 128}, {256, 64}, {64, 256}, {128, 64}, {64, 128}, {64, 64}}};

/// A tile's main loop reuses each loaded element tm x tn / (tm + tn) times; the same guide
/// (§2.3) shows smaller tiles running less efficiently for that reason. Tiles of at least
/// 128 x 128 reuse enough to reach the large-GEMM fraction; smaller ones scale with reuse.
double tile_fraction(const Tile& t, double large_gemm_fraction) {
  const double reuse = double(t.m) * t.n / (t.m + t.n);
  constexpr double kFullReuse = 128.0 * 128 / (128 + 128);
  return large_gemm_fraction * std::min(1.0, reuse / kFullReuse);
}

}  // namespace

GpuPerformance::GpuPerformance(const GpuSpec& gpu, int dtype_bytes, int output_bytes)
    : gpu_(gpu),
      dtype_bytes_(dtype_bytes),
      output_bytes_(output_bytes > 0 ? output_bytes : dtype_bytes),
      peak_(gpu.peak_for_dtype(dtype_bytes)),
      gemm_fraction_(dtype_bytes == 1 && gpu.gemm_fp8_fraction > 0 ? gpu.gemm_fp8_fraction
                                                                   : gpu.gemm_fraction) {}

double GpuPerformance::achievable_bandwidth() const {
  return gpu_.hbm_bandwidth * kBandwidthFraction;
}

double memory_bound_seconds(const GpuSpec& gpu, double bytes) {
  if (bytes <= 0) return 0;
  return bytes / (gpu.hbm_bandwidth * kBandwidthFraction) + kLaunchSeconds;
}

double GpuPerformance::gemm_seconds(const GemmShape& s) const {
  if (s.m <= 0 || s.n <= 0 || s.k <= 0 || s.batch <= 0) return 0;
  const double sms = std::max(1, gpu_.sms);
  double best = INFINITY;
  for (const Tile& t : kTiles) {
    // Tile quantization: partial tiles cost a whole tile; wave quantization: the last
    // wave of tiles occupies the SMs as long as a full one.
    const double tiles = std::ceil(s.m / t.m) * std::ceil(s.n / t.n) * s.batch;
    const double waves = std::ceil(tiles / sms);
    const double tile_seconds =
        2.0 * t.m * t.n * s.k / (peak_ / sms * tile_fraction(t, gemm_fraction_));
    best = std::min(best, waves * tile_seconds);
  }
  const double bytes =
      (dtype_bytes_ * (s.m * s.k + s.k * s.n) + output_bytes_ * s.m * s.n) * s.batch;
  return std::max(best, bytes / achievable_bandwidth()) + kLaunchSeconds;
}

double GpuPerformance::gemm_efficiency(const GemmShape& s) const {
  const double t = gemm_seconds(s);
  return t > 0 ? s.flops() / (t * peak_) : 0;
}

double GpuPerformance::memory_seconds(double bytes) const {
  return memory_bound_seconds(gpu_, bytes);
}

double GpuPerformance::flash_attention_seconds(double flops, double blocks, bool backward) const {
  if (flops <= 0) return 0;
  const double sms = std::max(1, gpu_.sms);
  // Wave quantization over the (head, query block) grid, as for a GEMM's tiles.
  const double waves = std::ceil(std::max(blocks, 1.0) / sms);
  const double fill = std::max(blocks, 1.0) / (waves * sms);
  // The fused attention kernel's fraction of the peak on this GPU (GpuSpec, with its
  // sources; FlashAttention-2's under cost.attention = "flash2").
  const double fraction = backward ? gpu_.flash_backward_fraction : gpu_.flash_forward_fraction;
  return flops / (peak_ * fraction * fill) + kLaunchSeconds;
}

double ring_allreduce_seconds(double bytes, int n, const LinkSpec& link) {
  if (n <= 1 || bytes <= 0) return 0;
  return 2.0 * (n - 1) / n * bytes / (link.bandwidth * kNcclBusFraction) +
         2.0 * (n - 1) * link.latency;
}

double ring_step_seconds(double bytes, const LinkSpec& link) {
  if (bytes <= 0) return 0;
  return bytes / (link.bandwidth * kNcclBusFraction) + link.latency;
}

}  // namespace loom
