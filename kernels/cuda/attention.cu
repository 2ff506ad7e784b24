// Bitfield-mask attention kernels. One CTA = one 32-token tile (kAttentionTile == warp size)
// of one head of one sample, 8 warps, each warp owning 4 rows of the tile (4 rows keep
// the accumulators in registers; ptxas -v at sm_90: forward 124 registers, no spills):
//
//   forward, dQ:  CTA = query tile; loop over key tiles (skipping empty ones);
//                 per row, lane j scores key j of the key tile, so the softmax of a tile
//                 is two warp reductions and P V is 32 broadcasts of p_j.
//   dK, dV:       CTA = key tile of a kv head; loop over its query heads and query tiles;
//                 per key row, lane i handles query i of the query tile.
//
// Shared-memory rows read lane-by-lane (lane = token) are padded to head_dim + 1 floats
// so the 32 lanes hit 32 different banks.
#include <cfloat>
#include <stdexcept>

#include "core/bitfield_mask.hpp"
#include "kernels/cuda/attention.hpp"
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/check.hpp"
#include "kernels/reference/attention_ref.hpp"

namespace loom::kernels {
namespace {

using namespace attention_detail;

__global__ void __launch_bounds__(kThreads)
    forward_kernel(AttentionShape s, float scale, const float* q, const float* k, const float* v,
                   const std::uint64_t* mask, float* o, float* lse) {
  extern __shared__ float smem[];
  const int dim = s.head_dim, pitch = dim + 1;
  float* qs = smem;                         // [32][dim]
  float* ks = qs + kAttentionTile * dim;    // [32][dim + 1]
  float* vs = ks + kAttentionTile * pitch;  // [32][dim]
  __shared__ std::uint64_t q_words[kAttentionTile], k_words[kAttentionTile];
  __shared__ TileSummary q_sum, k_sum;
  const Index at{s};
  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * kAttentionTile;
  const int g = h / s.group(), warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  load_tile(qs, dim, q, s.ld_q, h, at, b, q0);
  load_words(q_words, &q_sum, mask, at, b, q0);
  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][kPerLane];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) acc[r][c] = 0.0f;
  }
  for (int k0 = 0; k0 < s.tokens; k0 += kAttentionTile) {
    __syncthreads();  // the previous key tile is consumed; q tile and summary are ready
    load_words(k_words, &k_sum, mask, at, b, k0);
    __syncthreads();
    if (tile_is_empty(q_sum, k_sum)) continue;  // uniform across the CTA
    load_tile(ks, pitch, k, s.ld_k, g, at, b, k0);
    load_tile(vs, dim, v, s.ld_v, g, at, b, k0);
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int row = warp * kRowsPerWarp + r, i = q0 + row, j = k0 + lane;
      if (i >= s.tokens) continue;  // warp-uniform
      const bool valid = j < s.tokens && may_attend(q_words[row], k_words[lane], i, j);
      const float score =
          valid ? scale * row_dot(qs + row * dim, ks + lane * pitch, dim) : -INFINITY;
      const float tile_max = warp_max(score);
      if (tile_max == -INFINITY) continue;  // no key of this tile for this row
      // Online softmax (Milakov & Gimelshein 2018; FlashAttention-2 Alg. 1).
      const float m_new = fmaxf(m[r], tile_max);
      const float p = valid ? __expf(score - m_new) : 0.0f;
      const float rescale = __expf(m[r] - m_new);
      l[r] = l[r] * rescale + warp_sum(p);
#pragma unroll
      for (int c = 0; c < kPerLane; ++c) acc[r][c] *= rescale;
      for (int jj = 0; jj < kAttentionTile; ++jj) {
        const float pj = __shfl_sync(kFull, p, jj);
        if (pj == 0.0f) continue;  // masked key: same value in every lane
#pragma unroll
        for (int c = 0; c < kPerLane; ++c) {
          const int d = lane + 32 * c;
          if (d < dim) acc[r][c] = fmaf(pj, vs[jj * dim + d], acc[r][c]);
        }
      }
      m[r] = m_new;
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int i = q0 + warp * kRowsPerWarp + r;
    if (i >= s.tokens) continue;
    float* out = o + at.row(b, i) * s.ld_o + h * dim;
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) {
      const int d = lane + 32 * c;
      if (d < dim) out[d] = l[r] > 0.0f ? acc[r][c] / l[r] : 0.0f;
    }
    if (lane == 0) lse[at.stat(b, h, i)] = l[r] > 0.0f ? m[r] + logf(l[r]) : -INFINITY;
  }
}

__global__ void __launch_bounds__(kThreads)
    delta_kernel(AttentionShape s, const float* o, const float* d_o, float* delta) {
  const Index at{s};
  const std::int64_t rows = static_cast<std::int64_t>(s.batch) * s.heads * s.tokens;
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (r >= rows) return;
  const int t = static_cast<int>(r % s.tokens), h = static_cast<int>((r / s.tokens) % s.heads);
  const int b = static_cast<int>(r / (static_cast<std::int64_t>(s.tokens) * s.heads));
  const std::int64_t base = at.row(b, t) * s.ld_o + h * s.head_dim;
  float acc = 0.0f;
  for (int d = threadIdx.x % 32; d < s.head_dim; d += 32) acc += o[base + d] * d_o[base + d];
  acc = warp_sum(acc);
  if (threadIdx.x % 32 == 0) delta[r] = acc;
}

__global__ void fill_mask_kernel(std::int64_t n, std::uint64_t word, std::uint64_t* mask) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i < n) mask[i] = word;
}

}  // namespace

void fill_mask(std::int64_t n, std::uint64_t word, std::uint64_t* mask, cudaStream_t stream) {
  if (n <= 0) return;
  fill_mask_kernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      n, word, mask);
  LOOM_CUDA_CHECK_LAUNCH("fill_mask_kernel");
}

void attention_forward(const AttentionShape& s, const float* q, const float* k, const float* v,
                       const std::uint64_t* mask, float* o, float* lse, cudaStream_t stream) {
  check_attention_shape(s);
  if (s.head_dim > kMaxHeadDim) throw std::invalid_argument("attention: head_dim > 128");
  const int smem = static_cast<int>(sizeof(float)) * kAttentionTile * (3 * s.head_dim + 1);
  LOOM_CUDA_CHECK(
      cudaFuncSetAttribute(forward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const dim3 grid(s.tiles(), s.heads, s.batch);
  forward_kernel<<<grid, kThreads, smem, stream>>>(s, s.scale(), q, k, v, mask, o, lse);
  LOOM_CUDA_CHECK_LAUNCH("attention forward_kernel");
}

void attention_delta(const AttentionShape& s, const float* o, const float* d_o, float* delta,
                     cudaStream_t stream) {
  check_attention_shape(s);
  const std::int64_t rows = static_cast<std::int64_t>(s.batch) * s.heads * s.tokens;
  const auto blocks = static_cast<unsigned>((rows + kWarps - 1) / kWarps);
  delta_kernel<<<blocks, kThreads, 0, stream>>>(s, o, d_o, delta);
  LOOM_CUDA_CHECK_LAUNCH("attention delta_kernel");
}

}  // namespace loom::kernels
