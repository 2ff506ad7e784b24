// Backward of bitfield-mask attention (FlashAttention-2's recomputation scheme, Dao 2023,
// Alg. 2, split into two launches so no atomics are needed and results are deterministic):
//
//   P = exp(scale q.k - lse)    dV_j += P dO_i     dP = dO_i . v_j
//   dS = P (dP - delta_i)       dK_j += scale dS q_i    dQ_i += scale dS k_j
//
// dkdv_kernel: CTA = key tile of one kv head; loops over the head's query-head group and
//              the query tiles, skipping empty tile pairs; lane i = query i of the tile.
// dq_kernel:   CTA = query tile of one head; loops over key tiles; lane j = key j.
#include <stdexcept>

#include "kernels/cuda/attention.hpp"
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/check.hpp"
#include "kernels/reference/attention_ref.hpp"

namespace loom::kernels {
namespace {

using namespace attention_detail;

struct Grads {
  const float* q;
  const float* k;
  const float* v;
  const std::uint64_t* mask;
  const float* lse;
  const float* delta;
  const float* d_o;
  float* dq;
  float* dk;
  float* dv;
};

__global__ void __launch_bounds__(kThreads) dkdv_kernel(AttentionShape s, float scale, Grads a) {
  extern __shared__ float smem[];
  const int dim = s.head_dim, pitch = dim + 1;
  float* ks = smem;                          // [32][dim]  this CTA's keys
  float* vs = ks + kAttentionTile * dim;     // [32][dim]
  float* qs = vs + kAttentionTile * dim;     // [32][dim + 1]  read lane = query
  float* dos = qs + kAttentionTile * pitch;  // [32][dim + 1]
  __shared__ float lse_s[kAttentionTile], delta_s[kAttentionTile];
  __shared__ std::uint64_t q_words[kAttentionTile], k_words[kAttentionTile];
  __shared__ TileSummary q_sum, k_sum;
  const Index at{s};
  const int b = blockIdx.z, g = blockIdx.y, k0 = blockIdx.x * kAttentionTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  load_tile(ks, dim, a.k, s.ld_k, g, at, b, k0);
  load_tile(vs, dim, a.v, s.ld_v, g, at, b, k0);
  load_words(k_words, &k_sum, a.mask, at, b, k0);
  float dk[kRowsPerWarp][kPerLane] = {}, dv[kRowsPerWarp][kPerLane] = {};
  for (int h = g * s.group(); h < (g + 1) * s.group(); ++h) {
    for (int q0 = 0; q0 < s.tokens; q0 += kAttentionTile) {
      __syncthreads();
      load_words(q_words, &q_sum, a.mask, at, b, q0);
      __syncthreads();
      if (tile_is_empty(q_sum, k_sum)) continue;  // uniform across the CTA
      load_tile(qs, pitch, a.q, s.ld_q, h, at, b, q0);
      load_tile(dos, pitch, a.d_o, s.ld_o, h, at, b, q0);
      if (threadIdx.x < kAttentionTile) {
        const int i = q0 + static_cast<int>(threadIdx.x);
        lse_s[threadIdx.x] = i < s.tokens ? a.lse[at.stat(b, h, i)] : 0.0f;
        delta_s[threadIdx.x] = i < s.tokens ? a.delta[at.stat(b, h, i)] : 0.0f;
      }
      __syncthreads();
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const int row = warp * kRowsPerWarp + r, j = k0 + row, i = q0 + lane;
        if (j >= s.tokens) continue;  // warp-uniform
        const bool valid = i < s.tokens && may_attend(q_words[lane], k_words[row], i, j);
        if (!__any_sync(kFull, valid)) continue;
        float p = 0.0f, ds = 0.0f;
        if (valid) {
          p = __expf(scale * row_dot(qs + lane * pitch, ks + row * dim, dim) - lse_s[lane]);
          ds = p * (row_dot(dos + lane * pitch, vs + row * dim, dim) - delta_s[lane]);
        }
        for (int ii = 0; ii < kAttentionTile; ++ii) {
          const float pi = __shfl_sync(kFull, p, ii), dsi = scale * __shfl_sync(kFull, ds, ii);
#pragma unroll
          for (int c = 0; c < kPerLane; ++c) {
            const int d = lane + 32 * c;
            if (d >= dim) continue;
            dv[r][c] = fmaf(pi, dos[ii * pitch + d], dv[r][c]);
            dk[r][c] = fmaf(dsi, qs[ii * pitch + d], dk[r][c]);
          }
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int j = k0 + warp * kRowsPerWarp + r;
    if (j >= s.tokens) continue;
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) {
      const int d = lane + 32 * c;
      if (d >= dim) continue;
      a.dk[at.row(b, j) * s.ld_k + g * dim + d] = dk[r][c];
      a.dv[at.row(b, j) * s.ld_v + g * dim + d] = dv[r][c];
    }
  }
}

__global__ void __launch_bounds__(kThreads) dq_kernel(AttentionShape s, float scale, Grads a) {
  extern __shared__ float smem[];
  const int dim = s.head_dim, pitch = dim + 1;
  float* qs = smem;                         // [32][dim]  this CTA's queries
  float* dos = qs + kAttentionTile * dim;   // [32][dim]
  float* ks = dos + kAttentionTile * dim;   // [32][dim + 1]  read lane = key
  float* vs = ks + kAttentionTile * pitch;  // [32][dim + 1]
  __shared__ std::uint64_t q_words[kAttentionTile], k_words[kAttentionTile];
  __shared__ TileSummary q_sum, k_sum;
  const Index at{s};
  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * kAttentionTile;
  const int g = h / s.group(), warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  load_tile(qs, dim, a.q, s.ld_q, h, at, b, q0);
  load_tile(dos, dim, a.d_o, s.ld_o, h, at, b, q0);
  load_words(q_words, &q_sum, a.mask, at, b, q0);
  float dq[kRowsPerWarp][kPerLane] = {}, lse[kRowsPerWarp], delta[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int i = min(q0 + warp * kRowsPerWarp + r, s.tokens - 1);
    lse[r] = a.lse[at.stat(b, h, i)];
    delta[r] = a.delta[at.stat(b, h, i)];
  }
  for (int k0 = 0; k0 < s.tokens; k0 += kAttentionTile) {
    __syncthreads();
    load_words(k_words, &k_sum, a.mask, at, b, k0);
    __syncthreads();
    if (tile_is_empty(q_sum, k_sum)) continue;
    load_tile(ks, pitch, a.k, s.ld_k, g, at, b, k0);
    load_tile(vs, pitch, a.v, s.ld_v, g, at, b, k0);
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int row = warp * kRowsPerWarp + r, i = q0 + row, j = k0 + lane;
      if (i >= s.tokens) continue;
      const bool valid = j < s.tokens && may_attend(q_words[row], k_words[lane], i, j);
      if (!__any_sync(kFull, valid)) continue;
      float ds = 0.0f;
      if (valid) {
        const float p = __expf(scale * row_dot(qs + row * dim, ks + lane * pitch, dim) - lse[r]);
        ds = scale * p * (row_dot(dos + row * dim, vs + lane * pitch, dim) - delta[r]);
      }
      for (int jj = 0; jj < kAttentionTile; ++jj) {
        const float dsj = __shfl_sync(kFull, ds, jj);
#pragma unroll
        for (int c = 0; c < kPerLane; ++c) {
          const int d = lane + 32 * c;
          if (d < dim) dq[r][c] = fmaf(dsj, ks[jj * pitch + d], dq[r][c]);
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int i = q0 + warp * kRowsPerWarp + r;
    if (i >= s.tokens) continue;
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) {
      const int d = lane + 32 * c;
      if (d < dim) a.dq[at.row(b, i) * s.ld_q + h * dim + d] = dq[r][c];
    }
  }
}

}  // namespace

void attention_backward(const AttentionShape& s, const float* q, const float* k, const float* v,
                        const std::uint64_t* mask, const float* lse, const float* delta,
                        const float* d_o, float* dq, float* dk, float* dv, cudaStream_t stream) {
  check_attention_shape(s);
  if (s.head_dim > kMaxHeadDim) throw std::invalid_argument("attention: head_dim > 128");
  const Grads grads{q, k, v, mask, lse, delta, d_o, dq, dk, dv};
  const int smem = static_cast<int>(sizeof(float)) * kAttentionTile * (4 * s.head_dim + 2);
  LOOM_CUDA_CHECK(
      cudaFuncSetAttribute(dkdv_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  LOOM_CUDA_CHECK(
      cudaFuncSetAttribute(dq_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  dkdv_kernel<<<dim3(s.tiles(), s.kv_heads, s.batch), kThreads, smem, stream>>>(s, s.scale(),
                                                                                grads);
  LOOM_CUDA_CHECK_LAUNCH("attention dkdv_kernel");
  dq_kernel<<<dim3(s.tiles(), s.heads, s.batch), kThreads, smem, stream>>>(s, s.scale(), grads);
  LOOM_CUDA_CHECK_LAUNCH("attention dq_kernel");
}

}  // namespace loom::kernels
