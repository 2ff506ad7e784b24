#include "executor/layer_math.hpp"

#include <cmath>

#include "core/errors.hpp"
#include "core/index.hpp"

namespace loom::exec {
namespace {

bool is_mlp(const LayerSpec& s) {
  return s.kind == LayerKind::kMlp;
}
int head_dim(const LayerSpec& s) {
  return s.head_size();
}

std::vector<float> gain_of(const Matrix& m) {
  return m.data;
}

/// Column sums of a ∘ b: the gradient of a per-column gain.
void accumulate_gain_grad(const Matrix& dn, const Matrix& xhat, Matrix& grad) {
  for (int r = 0; r < dn.rows; ++r) {
    for (int c = 0; c < dn.cols; ++c) grad.at(0, c) += dn.at(r, c) * xhat.at(r, c);
  }
}

Matrix map(const Matrix& a, float (*f)(float)) {
  Matrix out(a.rows, a.cols);
  for (size_t i = 0; i < a.size(); ++i) out.data[i] = f(a.data[i]);
  return out;
}

/// What RMSNorm `which` ("1" before attention, "2" before the MLP) keeps for its backward:
/// its output n, the normalised input xhat and the per-row inverse RMS (one row).
void save_norm(LayerTensors& saved, const std::string& which, Matrix n, Matrix xhat,
               std::vector<float> inv) {
  saved["n" + which] = std::move(n);
  saved["xhat" + which] = std::move(xhat);
  Matrix& row = saved["inv" + which] = Matrix(1, isize(inv));
  row.data = std::move(inv);
}

}  // namespace

int input_width(const LayerSpec& spec) {
  return spec.hidden;
}
int output_width(const LayerSpec& spec) {
  return is_mlp(spec) ? spec.out_hidden : spec.hidden;
}

void check_executable(const LayerSpec& s, const std::string& where) {
  if (s.hidden <= 0 || s.ffn <= 0 || (is_mlp(s) && s.out_hidden <= 0))
    throw InputError(where + ": hidden, ffn (and out_hidden) must be positive to execute");
  if (is_mlp(s)) return;
  if (s.moe() && s.capacity_factor > 0)
    throw InputError(where +
                     ".capacity_factor: the executors route dropless (every token to its top_k "
                     "experts); remove the key to execute the model");
  if (s.mla())
    throw InputError(where +
                     ".kv_lora_rank: the executors do not run multi-head latent attention yet; "
                     "simulate the model with `loom sim`");
  for (const auto& [given, key] :
       {std::pair{s.sliding_window > 0, "sliding_window"},
        std::pair{s.attention_sinks, "attention_sinks"}, std::pair{s.mtp, "mtp_layers"}}) {
    if (given)
      throw InputError(where + "." + key + ": the executors do not run it yet; simulate the " +
                       "model with `loom sim`");
  }
  if (s.heads <= 0 || s.kv_heads <= 0 || (s.head_dim == 0 && s.hidden % s.heads != 0) ||
      s.heads % s.kv_heads != 0) {
    throw InputError(where +
                     ": the executor needs hidden divisible by heads and heads by "
                     "kv_heads (hidden " +
                     std::to_string(s.hidden) + ", heads " + std::to_string(s.heads) +
                     ", kv_heads " + std::to_string(s.kv_heads) + ")");
  }
}

LayerTensors zero_parameters(const LayerSpec& s, int head_dim_override,
                             const ExpertGroup& experts) {
  LayerTensors t;
  if (is_mlp(s)) {
    t["w1"] = Matrix(s.hidden, s.ffn);
    t["w2"] = Matrix(s.ffn, s.out_hidden);
    return t;
  }
  const int d = head_dim_override > 0 ? head_dim_override : head_dim(s);
  t["norm1"] = Matrix(1, s.hidden);
  t["wq"] = Matrix(s.hidden, s.heads * d);
  t["wk"] = Matrix(s.hidden, s.kv_heads * d);
  t["wv"] = Matrix(s.hidden, s.kv_heads * d);
  t["wo"] = Matrix(s.heads * d, s.hidden);
  t["norm2"] = Matrix(1, s.hidden);
  if (s.moe()) {
    add_moe_parameters(s, experts, t);
    return t;
  }
  t["w1"] = Matrix(s.hidden, s.ffn);
  if (s.gated_mlp) t["w3"] = Matrix(s.hidden, s.ffn);
  t["w2"] = Matrix(s.ffn, s.hidden);
  return t;
}

LayerTensors init_parameters(const LayerSpec& spec, int layer, std::uint64_t seed, int head_dim,
                             const ExpertGroup& experts) {
  LayerTensors t = zero_parameters(spec, head_dim, experts);
  for (auto& [name, m] : t) {
    std::uint64_t key = hash_combine(hash_combine(seed, static_cast<std::uint64_t>(layer)),
                                     std::hash<std::string>{}(name));
    const bool gain = name.rfind("norm", 0) == 0;
    // Uniform(-a, a) has variance a^2/3: a = sqrt(3 / fan_in) keeps activations O(1).
    const float a = gain ? 0.1F : std::sqrt(3.0F / static_cast<float>(m.rows));
    for (size_t i = 0; i < m.size(); ++i) {
      const float u = hash_uniform(hash_combine(key, i));
      m.data[i] = gain ? 1.0F + a * u : a * u;
    }
  }
  return t;
}

Matrix layer_forward(const LayerSpec& s, const LayerTensors& p, const Matrix& x,
                     const std::vector<int>& lengths, LayerState* state) {
  LayerTensors& k = state->saved;
  if (is_mlp(s)) {
    Matrix a, y;
    matmul(x, p.at("w1"), a);
    Matrix u = map(a, gelu);
    matmul(u, p.at("w2"), y);
    k["x"] = x;
    k["a"] = std::move(a);
    k["u"] = std::move(u);
    return y;
  }
  layer_forward_qkv(p, x, state);
  const Matrix kk = k.at("k"), v = k.at("v");
  return layer_forward_attend(s, p, x, kk, v, AttentionRows::self(lengths), state);
}

void layer_forward_qkv(const LayerTensors& p, const Matrix& x, LayerState* state) {
  LayerTensors& k = state->saved;
  Matrix n1, xhat1, q, kk, v;
  std::vector<float> inv1;
  rmsnorm_forward(x, gain_of(p.at("norm1")), n1, xhat1, inv1);
  matmul(n1, p.at("wq"), q);
  matmul(n1, p.at("wk"), kk);
  matmul(n1, p.at("wv"), v);
  save_norm(k, "1", std::move(n1), std::move(xhat1), std::move(inv1));
  k["q"] = std::move(q);
  k["k"] = std::move(kk);
  k["v"] = std::move(v);
}

namespace {

/// The output projection of the attention core's output `attn`, the residual and the
/// second norm: x2 (`attn` and the norm kept for backward).
Matrix attention_output(const LayerTensors& p, const Matrix& x, Matrix attn, LayerState* state) {
  LayerTensors& k = state->saved;
  Matrix o, n2, xhat2;
  std::vector<float> inv2;
  matmul(attn, p.at("wo"), o);
  Matrix x2 = x;
  add_inplace(x2, o);
  rmsnorm_forward(x2, gain_of(p.at("norm2")), n2, xhat2, inv2);
  k["attn"] = std::move(attn);
  save_norm(k, "2", std::move(n2), std::move(xhat2), std::move(inv2));
  return x2;
}

/// The MLP (or the local experts) on x2 and the residual: the layer's output.
Matrix mlp_block(const LayerSpec& s, const LayerTensors& p, Matrix x2, LayerState* state) {
  LayerTensors& k = state->saved;
  const Matrix& n2 = k.at("n2");
  if (s.moe()) return moe_forward_local(s, p, x2, n2, state->moe);
  Matrix a, g, u;
  const Matrix m =
      mlp_forward(s, n2, p.at("w1"), s.gated_mlp ? &p.at("w3") : nullptr, p.at("w2"), a, g, u);
  Matrix y = std::move(x2);
  add_inplace(y, m);
  k["a"] = std::move(a);
  if (s.gated_mlp) k["g"] = std::move(g);
  k["u"] = std::move(u);
  return y;
}

}  // namespace

Matrix layer_forward_attention(const LayerSpec& s, const LayerTensors& p, const Matrix& x,
                               const Matrix& keys, const Matrix& values, const AttentionRows& rows,
                               LayerState* state) {
  LayerTensors& k = state->saved;
  Matrix attn = attention_forward(k.at("q"), keys, values, rows, s.heads, s.kv_heads, s.causal,
                                  &state->probs);
  // The keys attended to (the rank's own, or every rank's under context parallelism).
  k["keys"] = keys;
  k["values"] = values;
  state->rows = rows;
  return attention_output(p, x, std::move(attn), state);
}

Matrix layer_forward_attend(const LayerSpec& s, const LayerTensors& p, const Matrix& x,
                            const Matrix& keys, const Matrix& values, const AttentionRows& rows,
                            LayerState* state) {
  return mlp_block(s, p, layer_forward_attention(s, p, x, keys, values, rows, state), state);
}

Matrix layer_forward_from_attention(const LayerSpec& s, const LayerTensors& p, const Matrix& x,
                                    Matrix attn, LayerState* state) {
  return mlp_block(s, p, attention_output(p, x, std::move(attn), state), state);
}

namespace {

Matrix mlp_backward_input(const LayerTensors& p, LayerState& st, const Matrix& dy, bool need_dx,
                          bool keep) {
  const LayerTensors& k = st.saved;
  Matrix du, dx;
  matmul_bt(dy, p.at("w2"), du);
  const Matrix& a = k.at("a");
  for (size_t i = 0; i < du.size(); ++i) du.data[i] *= gelu_grad(a.data[i]);
  if (need_dx) matmul_bt(du, p.at("w1"), dx);
  if (keep) {
    st.grads["da"] = std::move(du);
    st.grads["dy"] = dy;
  }
  return dx;
}

}  // namespace

Matrix layer_backward_input(const LayerSpec& s, const LayerTensors& p, LayerState& st,
                            const Matrix& dy, const std::vector<int>& /*lengths: in state.rows*/,
                            bool need_dx) {
  const bool keep = !s.frozen;
  if (is_mlp(s)) return mlp_backward_input(p, st, dy, need_dx, keep);
  Matrix dx =
      layer_backward_from_attention(s, p, st, layer_backward_to_attention(s, p, st, dy), need_dx);
  if (!keep) st.grads.clear();
  return dx;
}

Matrix layer_backward_from_attention(const LayerSpec& s, const LayerTensors& p, LayerState& st,
                                     const Matrix& dattn, bool need_dx) {
  const LayerTensors& k = st.saved;
  Matrix dq, dk, dv;
  attention_backward(dattn, k.at("q"), k.at("keys"), k.at("values"), st.probs, st.rows, s.heads,
                     s.kv_heads, dq, dk, dv);
  return layer_backward_from_qkv(p, st, std::move(dq), std::move(dk), std::move(dv), need_dx);
}

Matrix layer_backward_to_attention(const LayerSpec& s, const LayerTensors& p, LayerState& st,
                                   const Matrix& dy) {
  const LayerTensors& k = st.saved;
  if (s.moe()) return layer_backward_from_n2(p, st, dy, moe_backward_local(s, p, dy, st.moe));
  Matrix da, dg;
  const Matrix no_gate;
  Matrix dn2 = mlp_backward(s, dy, p.at("w1"), s.gated_mlp ? &p.at("w3") : nullptr, p.at("w2"),
                            k.at("a"), s.gated_mlp ? k.at("g") : no_gate, da, dg);
  LayerTensors& w = st.grads;
  w["da"] = std::move(da);
  if (s.gated_mlp) w["dg"] = std::move(dg);
  return layer_backward_from_n2(p, st, dy, std::move(dn2));
}

Matrix layer_backward_from_n2(const LayerTensors& p, LayerState& st, const Matrix& dy, Matrix dn2) {
  const LayerTensors& k = st.saved;
  Matrix dx2, dattn;
  rmsnorm_backward_input(dn2, k.at("xhat2"), gain_of(p.at("norm2")), k.at("inv2").data, dx2);
  add_inplace(dx2, dy);  // residual
  matmul_bt(dx2, p.at("wo"), dattn);
  LayerTensors& w = st.grads;
  w["dy"] = dy;
  w["dn2"] = std::move(dn2);
  w["do"] = std::move(dx2);
  return dattn;
}

Matrix layer_backward_from_qkv(const LayerTensors& p, LayerState& st, Matrix dq, Matrix dk,
                               Matrix dv, bool need_dx) {
  const LayerTensors& k = st.saved;
  Matrix dn1, dx;
  matmul_bt(dq, p.at("wq"), dn1);
  matmul_bt(dk, p.at("wk"), dn1, true);
  matmul_bt(dv, p.at("wv"), dn1, true);
  if (need_dx) {
    rmsnorm_backward_input(dn1, k.at("xhat1"), gain_of(p.at("norm1")), k.at("inv1").data, dx);
    add_inplace(dx, st.grads.at("do"));  // residual
  }
  LayerTensors& w = st.grads;
  w["dq"] = std::move(dq);
  w["dk"] = std::move(dk);
  w["dv"] = std::move(dv);
  w["dn1"] = std::move(dn1);
  return dx;
}

void layer_backward_weight(const LayerSpec& s, const LayerState& st, LayerTensors& grads) {
  if (s.frozen) return;
  const LayerTensors& k = st.saved;
  const LayerTensors& w = st.grads;
  if (is_mlp(s)) {
    matmul_at(k.at("x"), w.at("da"), grads.at("w1"), true);
    matmul_at(k.at("u"), w.at("dy"), grads.at("w2"), true);
    return;
  }
  matmul_at(k.at("n1"), w.at("dq"), grads.at("wq"), true);
  matmul_at(k.at("n1"), w.at("dk"), grads.at("wk"), true);
  matmul_at(k.at("n1"), w.at("dv"), grads.at("wv"), true);
  matmul_at(k.at("attn"), w.at("do"), grads.at("wo"), true);
  if (s.moe()) {
    moe_backward_weight(s, k.at("n2"), st.moe, grads);
  } else {
    matmul_at(k.at("n2"), w.at("da"), grads.at("w1"), true);
    if (s.gated_mlp) matmul_at(k.at("n2"), w.at("dg"), grads.at("w3"), true);
    matmul_at(k.at("u"), w.at("dy"), grads.at("w2"), true);
  }
  accumulate_gain_grad(w.at("dn1"), k.at("xhat1"), grads.at("norm1"));
  accumulate_gain_grad(w.at("dn2"), k.at("xhat2"), grads.at("norm2"));
}

}  // namespace loom::exec
