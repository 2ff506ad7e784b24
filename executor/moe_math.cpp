#include "executor/moe_math.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

namespace loom::exec {
namespace {

std::string expert_name(int e, const char* w) {
  return "expert" + std::to_string(e) + "." + w;
}

/// The rows of `m` at `index`, in that order.
Matrix gather_rows(const Matrix& m, const std::vector<int>& index) {
  Matrix out(static_cast<int>(index.size()), m.cols);
  for (size_t i = 0; i < index.size(); ++i)
    std::copy(m.row(index[i]), m.row(index[i]) + m.cols, out.row(static_cast<int>(i)));
  return out;
}

const Matrix* gate_of(const LayerSpec& l, const LayerTensors& p, const std::string& w3) {
  return l.gated_mlp ? &p.at(w3) : nullptr;
}

/// Copies of the received buffers grouped by expert: for each owned expert, the positions
/// (in the concatenation) of its copies.
std::vector<std::vector<int>> by_expert(const LayerSpec& l, const ExpertGroup& group,
                                        const std::vector<int>& expert) {
  std::vector<std::vector<int>> rows(static_cast<size_t>(group.count(l)));
  for (size_t i = 0; i < expert.size(); ++i)
    rows[static_cast<size_t>(expert[i] - group.first(l))].push_back(static_cast<int>(i));
  return rows;
}

/// Splits rows concatenated in member order back into one buffer per member.
Exchange split_by_member(const Matrix& rows, const std::vector<int>& counts) {
  Exchange out(counts.size());
  int row = 0;
  for (size_t m = 0; m < counts.size(); ++m) {
    out[m].rows = Matrix(counts[m], rows.cols);
    std::copy(rows.row(row), rows.row(row + counts[m]), out[m].rows.row(0));
    row += counts[m];
  }
  return out;
}

Matrix concatenate(const Exchange& parts, int width, std::vector<int>* experts,
                   std::vector<int>* counts) {
  int total = 0;
  for (const TokenCopies& part : parts) total += part.rows.rows;
  Matrix all(total, width);
  int row = 0;
  for (const TokenCopies& part : parts) {
    if (part.rows.rows > 0) std::copy(part.rows.data.begin(), part.rows.data.end(), all.row(row));
    row += part.rows.rows;
    if (experts) experts->insert(experts->end(), part.expert.begin(), part.expert.end());
    if (counts) counts->push_back(part.rows.rows);
  }
  return all;
}

/// Row r of `from` to row rows[r] of `to`.
void scatter_rows(const Matrix& from, const std::vector<int>& rows, Matrix& to) {
  for (size_t r = 0; r < rows.size(); ++r)
    std::copy(from.row(static_cast<int>(r)), from.row(static_cast<int>(r)) + from.cols,
              to.row(rows[r]));
}

}  // namespace

Matrix mlp_forward(const LayerSpec& l, const Matrix& x, const Matrix& w1, const Matrix* w3,
                   const Matrix& w2, Matrix& a, Matrix& g, Matrix& u) {
  matmul(x, w1, a);
  u = Matrix(a.rows, a.cols);
  if (l.gated_mlp) {
    matmul(x, *w3, g);
    for (size_t i = 0; i < u.size(); ++i) u.data[i] = silu(a.data[i]) * g.data[i];
  } else {
    for (size_t i = 0; i < u.size(); ++i) u.data[i] = gelu(a.data[i]);
  }
  Matrix y;
  matmul(u, w2, y);
  return y;
}

Matrix mlp_backward(const LayerSpec& l, const Matrix& dy, const Matrix& w1, const Matrix* w3,
                    const Matrix& w2, const Matrix& a, const Matrix& g, Matrix& da, Matrix& dg) {
  Matrix du;
  matmul_bt(dy, w2, du);
  da = Matrix(du.rows, du.cols);
  if (l.gated_mlp) {
    dg = Matrix(du.rows, du.cols);
    for (size_t i = 0; i < du.size(); ++i) {
      da.data[i] = du.data[i] * g.data[i] * silu_grad(a.data[i]);
      dg.data[i] = du.data[i] * silu(a.data[i]);
    }
  } else {
    for (size_t i = 0; i < du.size(); ++i) da.data[i] = du.data[i] * gelu_grad(a.data[i]);
  }
  Matrix dx;
  matmul_bt(da, w1, dx);
  if (l.gated_mlp) matmul_bt(dg, *w3, dx, true);
  return dx;
}

std::vector<float> pack(const TokenCopies& copies) {
  std::vector<float> flat;
  flat.reserve(1 + copies.expert.size() + copies.rows.size());
  flat.push_back(static_cast<float>(copies.rows.rows));
  for (int e : copies.expert) flat.push_back(static_cast<float>(e));
  flat.insert(flat.end(), copies.rows.data.begin(), copies.rows.data.end());
  return flat;
}

TokenCopies unpack(const std::vector<float>& flat, int width, bool with_experts) {
  TokenCopies c;
  const int n = static_cast<int>(flat.at(0));
  size_t at = 1;
  if (with_experts) {
    for (int i = 0; i < n; ++i) c.expert.push_back(static_cast<int>(flat.at(at++)));
  }
  c.rows = Matrix(n, width);
  std::copy(flat.begin() + static_cast<std::ptrdiff_t>(at), flat.end(), c.rows.data.begin());
  return c;
}

void add_moe_parameters(const LayerSpec& l, const ExpertGroup& group, LayerTensors& t) {
  t["router"] = Matrix(l.hidden, l.experts);
  auto mlp = [&](const std::string& prefix, int width) {
    t[prefix + "w1"] = Matrix(l.hidden, width);
    if (l.gated_mlp) t[prefix + "w3"] = Matrix(l.hidden, width);
    t[prefix + "w2"] = Matrix(width, l.hidden);
  };
  for (int e = group.first(l); e < group.first(l) + group.count(l); ++e)
    mlp("expert" + std::to_string(e) + ".", l.expert_ffn);
  if (l.shared_experts > 0) mlp("shared.", l.shared_experts * l.expert_ffn);
}

Exchange moe_route(const LayerSpec& l, const LayerTensors& p, const Matrix& n2,
                   const ExpertGroup& group, MoeState& st) {
  const int T = n2.rows, E = l.experts, k = l.top_k;
  st.group = group;
  matmul(n2, p.at("router"), st.probs);
  st.chosen.assign(static_cast<size_t>(T) * k, 0);
  std::vector<int> order(static_cast<size_t>(E));
  for (int t = 0; t < T; ++t) {
    float* row = st.probs.row(t);
    const float top = *std::max_element(row, row + E);
    float sum = 0;
    for (int e = 0; e < E; ++e) sum += row[e] = std::exp(row[e] - top);
    for (int e = 0; e < E; ++e) row[e] /= sum;
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return row[a] > row[b]; });
    std::copy(order.begin(), order.begin() + k, st.chosen.begin() + static_cast<size_t>(t) * k);
  }
  st.sent.assign(static_cast<size_t>(group.ep), {});
  for (int c = 0; c < T * k; ++c)
    st.sent[static_cast<size_t>(group.owner(l, st.chosen[static_cast<size_t>(c)]))].push_back(c);
  Exchange out(static_cast<size_t>(group.ep));
  for (int m = 0; m < group.ep; ++m) {
    std::vector<int> tokens;
    for (int c : st.sent[static_cast<size_t>(m)]) {
      tokens.push_back(c / k);
      out[static_cast<size_t>(m)].expert.push_back(st.chosen[static_cast<size_t>(c)]);
    }
    out[static_cast<size_t>(m)].rows = gather_rows(n2, tokens);
  }
  return out;
}

Exchange moe_experts_forward(const LayerSpec& l, const LayerTensors& p, const Exchange& received,
                             MoeState& st) {
  const ExpertGroup& group = st.group;
  st.received = {};
  st.received_from.clear();
  st.received.rows = concatenate(received, l.hidden, &st.received.expert, &st.received_from);
  const int n = st.received.rows.rows, f = l.expert_ffn;
  st.a = Matrix(n, f);
  st.u = Matrix(n, f);
  if (l.gated_mlp) st.g = Matrix(n, f);
  Matrix out(n, l.hidden);
  const auto groups = by_expert(l, group, st.received.expert);
  for (size_t i = 0; i < groups.size(); ++i) {
    const int e = group.first(l) + static_cast<int>(i);
    const std::vector<int>& rows = groups[i];
    Matrix a, g, u;
    const Matrix y =
        mlp_forward(l, gather_rows(st.received.rows, rows), p.at(expert_name(e, "w1")),
                    gate_of(l, p, expert_name(e, "w3")), p.at(expert_name(e, "w2")), a, g, u);
    scatter_rows(a, rows, st.a);
    scatter_rows(u, rows, st.u);
    if (l.gated_mlp) scatter_rows(g, rows, st.g);
    scatter_rows(y, rows, out);
  }
  return split_by_member(out, st.received_from);
}

Matrix moe_combine(const LayerSpec& l, const LayerTensors& p, const Matrix& x2, const Matrix& n2,
                   Exchange returned, MoeState& st) {
  const int k = l.top_k;
  Matrix y = x2;
  for (size_t m = 0; m < st.sent.size(); ++m) {
    const std::vector<int>& copies = st.sent[m];
    for (size_t i = 0; i < copies.size(); ++i) {
      const int c = copies[i], t = c / k;
      const float w = st.probs.at(t, st.chosen[static_cast<size_t>(c)]);
      const float* h = returned[m].rows.row(static_cast<int>(i));
      float* out = y.row(t);
      for (int j = 0; j < l.hidden; ++j) out[j] += w * h[j];
    }
  }
  st.returned = std::move(returned);
  if (l.shared_experts > 0) {
    add_inplace(y, mlp_forward(l, n2, p.at("shared.w1"), gate_of(l, p, "shared.w3"),
                               p.at("shared.w2"), st.shared_a, st.shared_g, st.shared_u));
  }
  return y;
}

Exchange moe_combine_backward(const LayerSpec& l, const Matrix& dy, const MoeState& st) {
  const int k = l.top_k;
  Exchange out(st.sent.size());
  for (size_t m = 0; m < st.sent.size(); ++m) {
    const std::vector<int>& copies = st.sent[m];
    out[m].rows = Matrix(static_cast<int>(copies.size()), l.hidden);
    for (size_t i = 0; i < copies.size(); ++i) {
      const int c = copies[i], t = c / k;
      const float w = st.probs.at(t, st.chosen[static_cast<size_t>(c)]);
      float* g = out[m].rows.row(static_cast<int>(i));
      for (int j = 0; j < l.hidden; ++j) g[j] = w * dy.at(t, j);
    }
  }
  return out;
}

Exchange moe_experts_backward(const LayerSpec& l, const LayerTensors& p, const Exchange& grads,
                              MoeState& st) {
  const ExpertGroup& group = st.group;
  std::vector<int> counts;
  st.dh = concatenate(grads, l.hidden, nullptr, &counts);
  const int n = st.dh.rows, f = l.expert_ffn;
  st.da = Matrix(n, f);
  if (l.gated_mlp) st.dg = Matrix(n, f);
  Matrix dx(n, l.hidden);
  const auto groups = by_expert(l, group, st.received.expert);
  for (size_t i = 0; i < groups.size(); ++i) {
    const int e = group.first(l) + static_cast<int>(i);
    const std::vector<int>& rows = groups[i];
    Matrix da, dg;
    const Matrix a = gather_rows(st.a, rows);
    const Matrix g = l.gated_mlp ? gather_rows(st.g, rows) : Matrix();
    const Matrix d =
        mlp_backward(l, gather_rows(st.dh, rows), p.at(expert_name(e, "w1")),
                     gate_of(l, p, expert_name(e, "w3")), p.at(expert_name(e, "w2")), a, g, da, dg);
    scatter_rows(da, rows, st.da);
    if (l.gated_mlp) scatter_rows(dg, rows, st.dg);
    scatter_rows(d, rows, dx);
  }
  return split_by_member(dx, st.received_from);
}

Matrix moe_route_backward(const LayerSpec& l, const LayerTensors& p, const Matrix& dy,
                          const Exchange& input_grads, MoeState& st) {
  const int T = dy.rows, E = l.experts, k = l.top_k;
  Matrix dn2(T, l.hidden);
  // dL/dp[t, e_j] = dy_t . h_tj: the router's gradient through the weights it chose.
  Matrix dprobs(T, E);
  for (size_t m = 0; m < st.sent.size(); ++m) {
    const std::vector<int>& copies = st.sent[m];
    for (size_t i = 0; i < copies.size(); ++i) {
      const int c = copies[i], t = c / k;
      const float* h = st.returned[m].rows.row(static_cast<int>(i));
      const float* dx = input_grads[m].rows.row(static_cast<int>(i));
      float dot = 0;
      for (int j = 0; j < l.hidden; ++j) {
        dot += dy.at(t, j) * h[j];
        dn2.at(t, j) += dx[j];
      }
      dprobs.at(t, st.chosen[static_cast<size_t>(c)]) += dot;
    }
  }
  // Softmax backward: dlogits = p * (dp - sum_e p_e dp_e).
  st.dlogits = Matrix(T, E);
  for (int t = 0; t < T; ++t) {
    float s = 0;
    for (int e = 0; e < E; ++e) s += st.probs.at(t, e) * dprobs.at(t, e);
    for (int e = 0; e < E; ++e) st.dlogits.at(t, e) = st.probs.at(t, e) * (dprobs.at(t, e) - s);
  }
  matmul_bt(st.dlogits, p.at("router"), dn2, true);
  if (l.shared_experts > 0) {
    st.shared_dy = dy;
    add_inplace(
        dn2, mlp_backward(l, dy, p.at("shared.w1"), gate_of(l, p, "shared.w3"), p.at("shared.w2"),
                          st.shared_a, st.shared_g, st.shared_da, st.shared_dg));
  }
  return dn2;
}

void moe_backward_weight(const LayerSpec& l, const Matrix& n2, const MoeState& st,
                         LayerTensors& grads) {
  const ExpertGroup& group = st.group;
  matmul_at(n2, st.dlogits, grads.at("router"), true);
  const auto groups = by_expert(l, group, st.received.expert);
  for (size_t i = 0; i < groups.size(); ++i) {
    const int e = group.first(l) + static_cast<int>(i);
    const std::vector<int>& rows = groups[i];
    const Matrix x = gather_rows(st.received.rows, rows);
    matmul_at(x, gather_rows(st.da, rows), grads.at(expert_name(e, "w1")), true);
    if (l.gated_mlp) matmul_at(x, gather_rows(st.dg, rows), grads.at(expert_name(e, "w3")), true);
    matmul_at(gather_rows(st.u, rows), gather_rows(st.dh, rows), grads.at(expert_name(e, "w2")),
              true);
  }
  if (l.shared_experts > 0) {
    matmul_at(n2, st.shared_da, grads.at("shared.w1"), true);
    if (l.gated_mlp) matmul_at(n2, st.shared_dg, grads.at("shared.w3"), true);
    matmul_at(st.shared_u, st.shared_dy, grads.at("shared.w2"), true);
  }
}

Matrix moe_forward_local(const LayerSpec& l, const LayerTensors& p, const Matrix& x2,
                         const Matrix& n2, MoeState& st) {
  Exchange copies = moe_route(l, p, n2, ExpertGroup{}, st);
  return moe_combine(l, p, x2, n2, moe_experts_forward(l, p, copies, st), st);
}

Matrix moe_backward_local(const LayerSpec& l, const LayerTensors& p, const Matrix& dy,
                          MoeState& st) {
  const Exchange grads = moe_combine_backward(l, dy, st);
  return moe_route_backward(l, p, dy, moe_experts_backward(l, p, grads, st), st);
}

}  // namespace loom::exec
