#include "kernels/reference/attention_ref.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/bitfield_mask.hpp"

namespace loom::kernels {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

/// Pointers to row t of head h (or kv head) of sample b.
struct Rows {
  const AttentionShape& s;
  std::int64_t row(int b, int t) const { return static_cast<std::int64_t>(b) * s.tokens + t; }
  std::int64_t q(int b, int t, int h) const { return row(b, t) * s.ld_q + h * s.head_dim; }
  std::int64_t k(int b, int t, int g) const { return row(b, t) * s.ld_k + g * s.head_dim; }
  std::int64_t v(int b, int t, int g) const { return row(b, t) * s.ld_v + g * s.head_dim; }
  std::int64_t o(int b, int t, int h) const { return row(b, t) * s.ld_o + h * s.head_dim; }
  std::int64_t stat(int b, int h, int t) const {
    return (static_cast<std::int64_t>(b) * s.heads + h) * s.tokens + t;
  }
};

float dot(const float* a, const float* b, int n) {
  float acc = 0.0f;
  for (int d = 0; d < n; ++d) acc += a[d] * b[d];
  return acc;
}

std::vector<TileSummary> summaries_of(const AttentionShape& s, const std::uint64_t* mask, int b) {
  std::vector<TileSummary> tiles(static_cast<size_t>(s.tiles()));
  summarize_tiles(mask + static_cast<std::int64_t>(b) * s.tokens, s.tokens, tiles.data());
  return tiles;
}

}  // namespace

void check_attention_shape(const AttentionShape& s) {
  const auto fail = [](const std::string& what) {
    throw std::invalid_argument("attention shape: " + what);
  };
  if (s.batch <= 0 || s.tokens <= 0 || s.heads <= 0 || s.kv_heads <= 0 || s.head_dim <= 0)
    fail("batch, tokens, heads, kv_heads and head_dim must be positive");
  if (s.heads % s.kv_heads != 0) fail("kv_heads must divide heads");
  if (s.ld_q < static_cast<std::int64_t>(s.heads) * s.head_dim ||
      s.ld_o < static_cast<std::int64_t>(s.heads) * s.head_dim ||
      s.ld_k < static_cast<std::int64_t>(s.kv_heads) * s.head_dim ||
      s.ld_v < static_cast<std::int64_t>(s.kv_heads) * s.head_dim)
    fail("a row stride is shorter than its heads x head_dim");
}

void summarize_tiles(const std::uint64_t* mask, int tokens, TileSummary* out) {
  for (int t = 0; t < tokens; ++t) {
    TileSummary& tile = out[t / kAttentionTile];
    if (t % kAttentionTile == 0) tile = TileSummary::empty();
    tile.add(mask[t], t);
  }
}

AttentionStats attention_tile_stats(const AttentionShape& s, const std::uint64_t* mask) {
  check_attention_shape(s);
  AttentionStats stats;
  for (int b = 0; b < s.batch; ++b) {
    const std::vector<TileSummary> tiles = summaries_of(s, mask, b);
    for (const TileSummary& q : tiles)
      for (const TileSummary& k : tiles) {
        stats.tile_pairs += s.heads;
        stats.skipped += tile_is_empty(q, k) ? s.heads : 0;
      }
  }
  return stats;
}

AttentionStats attention_forward_ref(const AttentionShape& s, const float* q, const float* k,
                                     const float* v, const std::uint64_t* mask, float* o,
                                     float* lse) {
  check_attention_shape(s);
  const Rows at{s};
  const int n_tiles = s.tiles(), dim = s.head_dim;
  const float scale = s.scale();
  AttentionStats stats;
  std::vector<float> acc(static_cast<size_t>(dim));
  for (int b = 0; b < s.batch; ++b) {
    const std::vector<TileSummary> tiles = summaries_of(s, mask, b);
    const std::uint64_t* words = mask + static_cast<std::int64_t>(b) * s.tokens;
    for (int h = 0; h < s.heads; ++h) {
      const int g = h / s.group();
      for (int qt = 0; qt < n_tiles; ++qt) {
        std::vector<bool> visit(static_cast<size_t>(n_tiles));
        for (int kt = 0; kt < n_tiles; ++kt) {
          visit[static_cast<size_t>(kt)] = !tile_is_empty(tiles[qt], tiles[kt]);
          stats.tile_pairs += 1;
          stats.skipped += visit[static_cast<size_t>(kt)] ? 0 : 1;
        }
        const int q_end = std::min(s.tokens, (qt + 1) * kAttentionTile);
        for (int i = qt * kAttentionTile; i < q_end; ++i) {
          // Online softmax (Milakov & Gimelshein): running max m and sum l per row.
          float m = kNegInf, l = 0.0f;
          std::fill(acc.begin(), acc.end(), 0.0f);
          for (int kt = 0; kt < n_tiles; ++kt) {
            if (!visit[static_cast<size_t>(kt)]) continue;
            const int k_end = std::min(s.tokens, (kt + 1) * kAttentionTile);
            for (int j = kt * kAttentionTile; j < k_end; ++j) {
              if (!may_attend(words[i], words[j], i, j)) continue;
              const float score = scale * dot(q + at.q(b, i, h), k + at.k(b, j, g), dim);
              const float m_new = std::max(m, score);
              const float rescale = std::exp(m - m_new), p = std::exp(score - m_new);
              l = l * rescale + p;
              for (int d = 0; d < dim; ++d) acc[d] = acc[d] * rescale + p * v[at.v(b, j, g) + d];
              m = m_new;
            }
          }
          float* out = o + at.o(b, i, h);
          for (int d = 0; d < dim; ++d) out[d] = l > 0.0f ? acc[d] / l : 0.0f;
          lse[at.stat(b, h, i)] = l > 0.0f ? m + std::log(l) : kNegInf;
        }
      }
    }
  }
  return stats;
}

void attention_delta_ref(const AttentionShape& s, const float* o, const float* d_o, float* delta) {
  check_attention_shape(s);
  const Rows at{s};
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.heads; ++h)
      for (int t = 0; t < s.tokens; ++t)
        delta[at.stat(b, h, t)] = dot(o + at.o(b, t, h), d_o + at.o(b, t, h), s.head_dim);
}

AttentionStats attention_backward_ref(const AttentionShape& s, const float* q, const float* k,
                                      const float* v, const std::uint64_t* mask, const float* lse,
                                      const float* delta, const float* d_o, float* dq, float* dk,
                                      float* dv) {
  check_attention_shape(s);
  const Rows at{s};
  const int n_tiles = s.tiles(), dim = s.head_dim;
  const float scale = s.scale();
  AttentionStats stats;
  for (int b = 0; b < s.batch; ++b) {
    for (int t = 0; t < s.tokens; ++t) {
      std::fill_n(dq + at.row(b, t) * s.ld_q, s.heads * dim, 0.0f);
      std::fill_n(dk + at.row(b, t) * s.ld_k, s.kv_heads * dim, 0.0f);
      std::fill_n(dv + at.row(b, t) * s.ld_v, s.kv_heads * dim, 0.0f);
    }
    const std::vector<TileSummary> tiles = summaries_of(s, mask, b);
    const std::uint64_t* words = mask + static_cast<std::int64_t>(b) * s.tokens;
    for (int h = 0; h < s.heads; ++h) {
      const int g = h / s.group();
      for (int qt = 0; qt < n_tiles; ++qt) {
        for (int kt = 0; kt < n_tiles; ++kt) {
          stats.tile_pairs += 1;
          if (tile_is_empty(tiles[qt], tiles[kt])) {
            stats.skipped += 1;
            continue;
          }
          const int q_end = std::min(s.tokens, (qt + 1) * kAttentionTile);
          const int k_end = std::min(s.tokens, (kt + 1) * kAttentionTile);
          for (int i = qt * kAttentionTile; i < q_end; ++i) {
            for (int j = kt * kAttentionTile; j < k_end; ++j) {
              if (!may_attend(words[i], words[j], i, j)) continue;
              const float* qi = q + at.q(b, i, h);
              const float* kj = k + at.k(b, j, g);
              const float* vj = v + at.v(b, j, g);
              const float* doi = d_o + at.o(b, i, h);
              const float p = std::exp(scale * dot(qi, kj, dim) - lse[at.stat(b, h, i)]);
              const float ds = p * (dot(doi, vj, dim) - delta[at.stat(b, h, i)]);
              float* dqi = dq + at.q(b, i, h);
              float* dkj = dk + at.k(b, j, g);
              float* dvj = dv + at.v(b, j, g);
              for (int d = 0; d < dim; ++d) {
                dvj[d] += p * doi[d];
                dqi[d] += scale * ds * kj[d];
                dkj[d] += scale * ds * qi[d];
              }
            }
          }
        }
      }
    }
  }
  return stats;
}

}  // namespace loom::kernels
