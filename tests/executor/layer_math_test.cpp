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

TEST(LayerMath, MixtureOfExpertsMatchesFiniteDifferences) {
  // Router softmax and top 2 of 4 experts, gated experts and a shared one: the router's
  // gradient flows through the weights of the experts it chose (top-k itself is piecewise
  // constant, and these inputs sit away from its ties).
  LayerSpec s;
  s.hidden = 16;
  s.ffn = 24;
  s.heads = 4;
  s.kv_heads = 2;
  s.gated_mlp = true;
  s.causal = true;
  s.experts = 4;
  s.top_k = 2;
  s.expert_ffn = 12;
  s.shared_experts = 1;
  check_layer(s);
  s.gated_mlp = false;
  s.shared_experts = 0;
  check_layer(s);
}

TEST(LayerMath, ExpertsSplitOverAGroupComputeTheLayerAlone) {
  // Two members each holding half of the experts, their token copies exchanged by hand,
  // give the single rank's output and input gradient exactly.
  LayerSpec s;
  s.hidden = 16;
  s.heads = 4;
  s.kv_heads = 4;
  s.gated_mlp = true;
  s.experts = 4;
  s.top_k = 2;
  s.expert_ffn = 8;
  const std::vector<ExpertGroup> members = {{2, 0}, {2, 1}};
  const Matrix x2 = random_matrix(6, 16, 3), n2 = random_matrix(6, 16, 4),
               dy = random_matrix(6, 16, 5);
  LayerTensors whole = init_parameters(s, 1, 42);
  MoeState alone;
  const Matrix y = moe_forward_local(s, whole, x2, n2, alone);
  const Matrix dn2 = moe_backward_local(s, whole, dy, alone);

  // Both members route the same tokens here (a sample split over data parallelism would
  // give each its own); member 0's view is checked.
  std::vector<LayerTensors> params;
  std::vector<MoeState> st(2);
  std::vector<Exchange> out(2);
  for (int m = 0; m < 2; ++m) {
    params.push_back(init_parameters(s, 1, 42, 0, members[m]));
    out[m] = moe_route(s, params[m], n2, members[m], st[m]);
  }
  auto exchange = [](std::vector<Exchange>& sent) {  // member i's buffer j -> member j's i
    std::vector<Exchange> got(2, Exchange(2));
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j) got[j][i] = sent[i][j];
    return got;
  };
  std::vector<Exchange> in = exchange(out);
  for (int m = 0; m < 2; ++m) out[m] = moe_experts_forward(s, params[m], in[m], st[m]);
  in = exchange(out);
  // Equal up to the order the slots are summed in (member 0's experts first).
  auto differs = [](const Matrix& a, const Matrix& b) {
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i)
      worst = std::max(worst, double(std::abs(a.data[i] - b.data[i])));
    return worst;
  };
  const Matrix y0 = moe_combine(s, params[0], x2, n2, in[0], st[0]);
  ASSERT_EQ(y0.size(), y.size());
  EXPECT_LT(differs(y0, y), 1e-5);
  for (int m = 0; m < 2; ++m) out[m] = moe_combine_backward(s, dy, st[m]);
  in = exchange(out);
  for (int m = 0; m < 2; ++m) out[m] = moe_experts_backward(s, params[m], in[m], st[m]);
  in = exchange(out);
  const Matrix dn2_0 = moe_route_backward(s, params[0], dy, in[0], st[0]);
  ASSERT_EQ(dn2_0.size(), dn2.size());
  EXPECT_LT(differs(dn2_0, dn2), 1e-5);
  // Copies did cross: each member sent some to the other.
  EXPECT_GT(st[0].sent[1].size(), 0u);
  EXPECT_GT(st[1].sent[0].size(), 0u);
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

// The GEMM kernels are blocked for speed, but every output element must still be the sum
// of its products in ascending k, added to C last: the results are then independent of
// the blocking, and the same as the textbook loop's, bit for bit.

/// op(A) op(B) by the definition, one dot product per element in ascending k, then added
/// to `c0` (zero when absent): what C += (A B^T) means.
Matrix textbook(const Matrix& a, bool a_t, const Matrix& b, bool b_t, const Matrix* c0) {
  const int m = a_t ? a.cols : a.rows, k = a_t ? a.rows : a.cols, n = b_t ? b.rows : b.cols;
  Matrix c = c0 ? *c0 : Matrix(m, n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      float s = 0;
      for (int p = 0; p < k; ++p)
        s += (a_t ? a.at(p, i) : a.at(i, p)) * (b_t ? b.at(j, p) : b.at(p, j));
      c.at(i, j) += s;
    }
  return c;
}

/// The in-place accumulation C += op(A) B adds each product to C as it goes.
Matrix accumulated(const Matrix& a, bool a_t, const Matrix& b, Matrix c) {
  const int m = a_t ? a.cols : a.rows, k = a_t ? a.rows : a.cols;
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < b.cols; ++j)
      for (int p = 0; p < k; ++p) c.at(i, j) += (a_t ? a.at(p, i) : a.at(i, p)) * b.at(p, j);
  return c;
}

TEST(Gemm, EveryTranspositionEqualsTheTextbookLoopBitForBit) {
  // Row counts around the kernel's block of four, and a k long enough to round.
  for (const int m : {1, 3, 4, 7, 13}) {
    const int k = 37, n = 11;
    const Matrix a = random_matrix(m, k, 1), at = random_matrix(k, m, 2);
    const Matrix b = random_matrix(k, n, 3), bt = random_matrix(n, k, 4);
    const Matrix c0 = random_matrix(m, n, 5);

    Matrix c;
    matmul(a, b, c);
    EXPECT_EQ(c.data, textbook(a, false, b, false, nullptr).data) << "matmul m " << m;
    c = c0;
    matmul(a, b, c, /*accumulate=*/true);
    EXPECT_EQ(c.data, accumulated(a, false, b, c0).data) << "matmul += m " << m;

    matmul_bt(a, bt, c);
    EXPECT_EQ(c.data, textbook(a, false, bt, true, nullptr).data) << "matmul_bt m " << m;
    c = c0;
    matmul_bt(a, bt, c, true);
    EXPECT_EQ(c.data, textbook(a, false, bt, true, &c0).data) << "matmul_bt += m " << m;

    matmul_at(at, b, c);
    EXPECT_EQ(c.data, textbook(at, true, b, false, nullptr).data) << "matmul_at m " << m;
    c = c0;
    matmul_at(at, b, c, true);
    EXPECT_EQ(c.data, accumulated(at, true, b, c0).data) << "matmul_at += m " << m;
  }
}

}  // namespace
}  // namespace loom::exec
