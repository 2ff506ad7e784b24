// CPU reference of bitfield-mask attention: the §3.4.2 predicate, agreement with a dense
// mask computed in double, block-skipping counts, and backward vs finite differences.
#include "kernels/reference/attention_ref.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "core/bitfield_mask.hpp"
#include "tests/kernels/kernel_test_support.hpp"

namespace loom::kernels {
namespace {

using test::causal_text;
using test::image_then_text;
using test::random_vector;

/// Dense attention in double: build the N x N mask from the predicate, softmax, multiply.
/// Independent of the tiling, the online softmax and block skipping of the reference.
std::vector<double> dense_attention(const AttentionShape& s, const std::vector<float>& q,
                                    const std::vector<float>& k, const std::vector<float>& v,
                                    const std::vector<std::uint64_t>& mask) {
  std::vector<double> o(static_cast<size_t>(s.batch) * s.tokens * s.ld_o, 0.0);
  const int n = s.tokens, dim = s.head_dim;
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.heads; ++h) {
      const int g = h / s.group();
      for (int i = 0; i < n; ++i) {
        std::vector<double> score(static_cast<size_t>(n), -1e300);
        double m = -1e300;
        for (int j = 0; j < n; ++j) {
          if (!may_attend(mask[b * n + i], mask[b * n + j], i, j)) continue;
          double acc = 0.0;
          for (int d = 0; d < dim; ++d)
            acc += double(q[(b * n + i) * s.ld_q + h * dim + d]) *
                   k[(b * n + j) * s.ld_k + g * dim + d];
          score[j] = acc * s.scale();
          m = std::max(m, score[j]);
        }
        if (m == -1e300) continue;
        double sum = 0.0;
        for (int j = 0; j < n; ++j) sum += score[j] > -1e299 ? std::exp(score[j] - m) : 0.0;
        for (int j = 0; j < n; ++j) {
          if (score[j] <= -1e299) continue;
          const double p = std::exp(score[j] - m) / sum;
          for (int d = 0; d < dim; ++d)
            o[(b * n + i) * s.ld_o + h * dim + d] += p * v[(b * n + j) * s.ld_v + g * dim + d];
        }
      }
    }
  return o;
}

TEST(BitfieldMask, ReproducesTheDissertationFigure34Example) {
  // t0, t1, t4, t5 text (causal, every modality bit); t2, t3 encoder A (bit A only).
  const std::uint64_t text = kCausalBit | modality_bit(0) | modality_bit(1);
  const std::uint64_t image = modality_bit(1);
  const std::vector<std::uint64_t> w = {text, text, image, image, text, text};
  const auto attends = [&](int q, int k) { return may_attend(w[q], w[k], q, k); };
  EXPECT_TRUE(attends(2, 3));  // image tokens see each other in both directions
  EXPECT_TRUE(attends(3, 2));
  EXPECT_FALSE(attends(2, 0));  // ... and only encoder-A tokens
  EXPECT_FALSE(attends(3, 4));
  EXPECT_TRUE(attends(4, 2));  // text sees earlier image and text tokens
  EXPECT_TRUE(attends(4, 0));
  EXPECT_TRUE(attends(5, 4));
  EXPECT_FALSE(attends(4, 5));              // but not later ones (causal bit)
  EXPECT_FALSE(may_attend(0, text, 1, 0));  // padding attends to nothing...
  EXPECT_FALSE(may_attend(text, 0, 1, 0));  // ... and is never attended to
}

TEST(BitfieldMask, TileSkippingIsConservative) {
  // Every pair of tiles the summaries call empty has no attending pair: random words.
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<std::uint64_t> w(64);
    for (auto& x : w) x = (rng() & 0x7) | ((rng() & 1) ? kCausalBit : 0);
    std::vector<TileSummary> tiles(2);
    summarize_tiles(w.data(), 64, tiles.data());
    for (int qt = 0; qt < 2; ++qt)
      for (int kt = 0; kt < 2; ++kt) {
        if (!tile_is_empty(tiles[qt], tiles[kt])) continue;
        for (int i = qt * 32; i < qt * 32 + 32; ++i)
          for (int j = kt * 32; j < kt * 32 + 32; ++j) ASSERT_FALSE(may_attend(w[i], w[j], i, j));
      }
  }
}

struct Case {
  const char* name;
  AttentionShape shape;
  std::vector<std::uint64_t> mask;
};

std::vector<Case> forward_cases() {
  std::vector<Case> cases;
  cases.push_back({"causal", AttentionShape::dense(1, 50, 2, 2, 8), causal_text(1, 50)});
  cases.push_back(
      {"image-then-text GQA", AttentionShape::dense(2, 70, 4, 2, 16), image_then_text(2, 70, 30)});
  AttentionShape strided = AttentionShape::dense(1, 40, 2, 1, 8);
  strided.ld_q = strided.ld_o = 3 * 16 + 5;  // Q K V packed in one row, plus padding
  strided.ld_k = strided.ld_v = 3 * 16 + 5;
  std::vector<std::uint64_t> padded = image_then_text(1, 40, 10);
  padded[39] = padded[38] = 0;  // two padding tokens at the end
  cases.push_back({"strided with padding", strided, padded});
  return cases;
}

TEST(AttentionReference, ForwardMatchesADenseMaskInDouble) {
  for (const Case& c : forward_cases()) {
    const AttentionShape& s = c.shape;
    const size_t rows = static_cast<size_t>(s.batch) * s.tokens;
    const auto q = random_vector(rows * s.ld_q, 1), k = random_vector(rows * s.ld_k, 2),
               v = random_vector(rows * s.ld_v, 3);
    std::vector<float> o(rows * s.ld_o, 0.0f), lse(rows * s.heads);
    attention_forward_ref(s, q.data(), k.data(), v.data(), c.mask.data(), o.data(), lse.data());
    const std::vector<double> want = dense_attention(s, q, k, v, c.mask);
    for (size_t r = 0; r < rows; ++r)
      for (int e = 0; e < s.heads * s.head_dim; ++e)
        ASSERT_NEAR(o[r * s.ld_o + e], want[r * s.ld_o + e], 1e-5) << c.name << " row " << r;
  }
}

TEST(AttentionReference, PaddingRowsGetZeroOutputAndMinusInfinityLse) {
  const AttentionShape s = AttentionShape::dense(1, 8, 1, 1, 4);
  std::vector<std::uint64_t> mask = causal_text(1, 8);
  mask[5] = 0;
  const auto q = random_vector(32, 1), k = random_vector(32, 2), v = random_vector(32, 3);
  std::vector<float> o(32, 1.0f), lse(8);
  attention_forward_ref(s, q.data(), k.data(), v.data(), mask.data(), o.data(), lse.data());
  for (int d = 0; d < 4; ++d) EXPECT_EQ(o[5 * 4 + d], 0.0f);
  EXPECT_EQ(lse[5], -std::numeric_limits<float>::infinity());
}

TEST(AttentionReference, SkipsExactlyTheEmptyTilesOfAPrefixMask) {
  // 64 image tokens (bit A, bidirectional) then 64 causal text tokens; 4 tiles of 32.
  // Image query tiles skip both text key tiles (4 pairs); the first text query tile skips
  // the later text key tile (1 pair): 5 of 16 pairs per (sample, head).
  const AttentionShape s = AttentionShape::dense(1, 128, 3, 3, 4);
  const std::vector<std::uint64_t> mask = image_then_text(1, 128, 64);
  const auto q = random_vector(128 * 12, 1), k = random_vector(128 * 12, 2),
             v = random_vector(128 * 12, 3);
  std::vector<float> o(128 * 12), lse(128 * 3);
  const AttentionStats stats =
      attention_forward_ref(s, q.data(), k.data(), v.data(), mask.data(), o.data(), lse.data());
  EXPECT_EQ(stats.tile_pairs, 16 * 3);
  EXPECT_EQ(stats.skipped, 5 * 3);
  const AttentionStats counted = attention_tile_stats(s, mask.data());
  EXPECT_EQ(counted.tile_pairs, stats.tile_pairs);
  EXPECT_EQ(counted.skipped, stats.skipped);
}

TEST(AttentionReference, BackwardMatchesFiniteDifferencesOfTheDenseForward) {
  // L = sum(O * dO); dL/dX by central differences of the double dense forward.
  AttentionShape s = AttentionShape::dense(1, 36, 2, 1, 4);
  const std::vector<std::uint64_t> mask = image_then_text(1, 36, 12);
  const size_t rows = 36;
  auto q = random_vector(rows * s.ld_q, 1), k = random_vector(rows * s.ld_k, 2),
       v = random_vector(rows * s.ld_v, 3);
  const auto d_o = random_vector(rows * s.ld_o, 4);
  std::vector<float> o(rows * s.ld_o), lse(rows * s.heads), delta(rows * s.heads);
  std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
  attention_forward_ref(s, q.data(), k.data(), v.data(), mask.data(), o.data(), lse.data());
  attention_delta_ref(s, o.data(), d_o.data(), delta.data());
  attention_backward_ref(s, q.data(), k.data(), v.data(), mask.data(), lse.data(), delta.data(),
                         d_o.data(), dq.data(), dk.data(), dv.data());
  const auto loss = [&] {
    const std::vector<double> out = dense_attention(s, q, k, v, mask);
    double l = 0.0;
    for (size_t i = 0; i < out.size(); ++i) l += out[i] * d_o[i];
    return l;
  };
  const auto check = [&](std::vector<float>& x, const std::vector<float>& grad, const char* n) {
    for (size_t i = 0; i < x.size(); i += 3) {
      const float saved = x[i];
      const float h = 1e-2f;
      x[i] = saved + h;
      const double up = loss();
      x[i] = saved - h;
      const double down = loss();
      x[i] = saved;
      ASSERT_NEAR(grad[i], (up - down) / (2.0 * h), 2e-3) << n << "[" << i << "]";
    }
  };
  check(q, dq, "dQ");
  check(k, dk, "dK");
  check(v, dv, "dV");
}

}  // namespace
}  // namespace loom::kernels
