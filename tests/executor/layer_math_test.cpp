// The host math is a reference only if its backward is the derivative of its forward:
// every input and weight gradient is checked against central finite differences of the
// scalar L = sum(y * r) for a fixed random r, in double-checked float.
#include "executor/layer_math.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

namespace loom::exec {
namespace {

Matrix random_matrix(int rows, int cols, std::uint64_t key) {
  Matrix m(rows, cols);
  for (size_t i = 0; i < m.size(); ++i) m.data[i] = hash_uniform(hash_combine(key, i));
  return m;
}

double objective(const LayerSpec& spec, const LayerTensors& p, const Matrix& x,
                 const std::vector<int>& lengths, const Matrix& r) {
  LayerState st;
  const Matrix y = layer_forward(spec, p, x, lengths, &st);
  double s = 0;
  for (size_t i = 0; i < y.size(); ++i) s += static_cast<double>(y.data[i]) * r.data[i];
  return s;
}

/// Max relative error of analytic vs numeric derivative over a few probed entries.
double probe(Matrix& m, const Matrix& analytic, const std::function<double()>& f) {
  double worst = 0;
  const float h = 1e-2F;
  for (size_t i = 0; i < m.size(); i += std::max<size_t>(1, m.size() / 17)) {
    const float keep = m.data[i];
    m.data[i] = keep + h;
    const double up = f();
    m.data[i] = keep - h;
    const double down = f();
    m.data[i] = keep;
    const double numeric = (up - down) / (2 * h);
    worst = std::max(worst, std::abs(numeric - analytic.data[i]) / (std::abs(numeric) + 1e-2));
  }
  return worst;
}

void check_layer(LayerSpec spec) {
  const std::vector<int> lengths = {5, 3};
  LayerTensors p = init_parameters(spec, 3, 42);
  Matrix x = random_matrix(8, spec.hidden, 7);
  const Matrix r = random_matrix(8, output_width(spec), 9);
  LayerState st;
  st.lengths = lengths;
  layer_forward(spec, p, x, lengths, &st);
  const Matrix dx = layer_backward_input(spec, p, st, r, lengths, true);
  LayerTensors grads = zero_parameters(spec);
  layer_backward_weight(spec, st, grads);
  auto f = [&] { return objective(spec, p, x, lengths, r); };
  EXPECT_LT(probe(x, dx, f), 2e-2) << "input gradient";
  for (auto& [name, w] : p) EXPECT_LT(probe(w, grads.at(name), f), 2e-2) << name;
}

TEST(LayerMath, TransformerGatedCausalGqaMatchesFiniteDifferences) {
  LayerSpec s;
  s.hidden = 16;
  s.ffn = 24;
  s.heads = 4;
  s.kv_heads = 2;
  s.gated_mlp = true;
  s.causal = true;
  check_layer(s);
}

TEST(LayerMath, TransformerPlainBidirectionalMatchesFiniteDifferences) {
  LayerSpec s;
  s.hidden = 12;
  s.ffn = 20;
  s.heads = 3;
  s.kv_heads = 3;
  check_layer(s);
}

TEST(LayerMath, ProjectorMlpMatchesFiniteDifferences) {
  LayerSpec s;
  s.kind = LayerKind::kMlp;
  s.hidden = 10;
  s.ffn = 14;
  s.out_hidden = 6;
  check_layer(s);
}

TEST(LayerMath, FrozenLayerKeepsNoWeightGradientInputs) {
  LayerSpec s;
  s.hidden = 8;
  s.ffn = 8;
  s.heads = 2;
  s.kv_heads = 2;
  s.frozen = true;
  const LayerTensors p = init_parameters(s, 0, 1);
  LayerState st;
  const Matrix x = random_matrix(4, 8, 3);
  layer_forward(s, p, x, {4}, &st);
  const Matrix dx = layer_backward_input(s, p, st, random_matrix(4, 8, 4), {4}, true);
  EXPECT_EQ(dx.rows, 4);
  EXPECT_TRUE(st.grads.empty());
}

TEST(LayerMath, CausalAttentionIgnoresFutureTokensAndSamplesAreIndependent) {
  // Changing the last token of sample 0 changes no earlier output of sample 0 (causal)
  // and nothing of sample 1 (packed samples never attend across).
  LayerSpec s;
  s.hidden = 8;
  s.ffn = 8;
  s.heads = 2;
  s.kv_heads = 1;
  s.causal = true;
  const LayerTensors p = init_parameters(s, 0, 5);
  Matrix x = random_matrix(7, 8, 11);
  LayerState a, b;
  const Matrix y1 = layer_forward(s, p, x, {4, 3}, &a);
  for (int c = 0; c < 8; ++c) x.at(3, c) += 1.0F;
  const Matrix y2 = layer_forward(s, p, x, {4, 3}, &b);
  for (int row : {0, 1, 2, 4, 5, 6}) {
    for (int c = 0; c < 8; ++c) EXPECT_FLOAT_EQ(y1.at(row, c), y2.at(row, c)) << row;
  }
}

}  // namespace
}  // namespace loom::exec
