#include "executor/cuda/layer_cuda.hpp"

#include "core/bitfield_mask.hpp"
#include "kernels/attention_shape.hpp"
#include "kernels/cuda/attention.hpp"
#include "kernels/cuda/check.hpp"
#include "kernels/cuda/elementwise.hpp"

namespace loom::exec::cuda {
namespace {

namespace k = loom::kernels;
constexpr float kRmsEps = 1e-6f;  // executor/tensor.cpp's RMSNorm epsilon

bool is_mlp(const LayerSpec& s) {
  return s.kind == LayerKind::kMlp;
}
int rows_of(const std::vector<int>& lengths) {
  int total = 0;
  for (int t : lengths) total += t;
  return total;
}

}  // namespace

void LayerRunner::xw(int rows, int in, int out, const float* x, int ldx, const DeviceMatrix& w,
                     float* y, int ldy, float beta) {
  blas_.gemm(k::Trans::kNo, k::Trans::kNo, rows, out, in, 1.0f, x, ldx, w.data(), out, beta, y,
             ldy);
}

void LayerRunner::dy_wt(int rows, int in, int out, const float* dy, int lddy, const DeviceMatrix& w,
                        float* dx, float beta) {
  blas_.gemm(k::Trans::kNo, k::Trans::kYes, rows, in, out, 1.0f, dy, lddy, w.data(), out, beta, dx,
             in);
}

void LayerRunner::xt_dy(int rows, int in, int out, const DeviceMatrix& x, const float* dy, int lddy,
                        DeviceMatrix& dw) {
  blas_.gemm(k::Trans::kYes, k::Trans::kNo, in, out, rows, 1.0f, x.data(), x.cols(), dy, lddy, 1.0f,
             dw.data(), out);
}

const std::uint64_t* LayerRunner::mask(int tokens, bool causal) {
  auto it = masks_.find({tokens, causal});
  if (it == masks_.end()) {
    // executor/attention.cpp: a causal layer lets token i see j <= i, else every token.
    const std::uint64_t word = causal ? (kCausalBit | modality_bit(0)) : modality_bit(1);
    DeviceMatrix words(1, 2 * tokens, stream_);
    k::fill_mask(tokens, word, reinterpret_cast<std::uint64_t*>(words.data()), stream_);
    it = masks_.emplace(std::make_pair(tokens, causal), std::move(words)).first;
  }
  return reinterpret_cast<const std::uint64_t*>(it->second.data());
}

void LayerRunner::attention_forward(const LayerSpec& s, DeviceLayerState& st) {
  DeviceTensors& sv = st.saved;
  const int rows = sv.at("q").rows(), d = head_dim(s);
  sv["attn"] = DeviceMatrix(rows, s.heads * d, stream_);
  sv["lse"] = DeviceMatrix(s.heads, rows, stream_);  // per sample [heads][len] blocks
  int offset = 0;
  for (int len : st.lengths) {
    if (len == 0) continue;
    const k::AttentionShape shape = k::AttentionShape::dense(1, len, s.heads, s.kv_heads, d);
    k::attention_forward(
        shape, sv.at("q").data() + offset * shape.ld_q, sv.at("k").data() + offset * shape.ld_k,
        sv.at("v").data() + offset * shape.ld_v, mask(len, s.causal),
        sv.at("attn").data() + offset * shape.ld_o,
        sv.at("lse").data() + static_cast<std::int64_t>(offset) * s.heads, stream_);
    offset += len;
  }
}

void LayerRunner::attention_backward(const LayerSpec& s, DeviceLayerState& st,
                                     const DeviceMatrix& d_attn) {
  const DeviceTensors& sv = st.saved;
  const int rows = d_attn.rows(), d = head_dim(s);
  DeviceMatrix delta(s.heads, rows, stream_);
  st.grads["dq"] = DeviceMatrix(rows, s.heads * d, stream_);
  st.grads["dk"] = DeviceMatrix(rows, s.kv_heads * d, stream_);
  st.grads["dv"] = DeviceMatrix(rows, s.kv_heads * d, stream_);
  int offset = 0;
  for (int len : st.lengths) {
    if (len == 0) continue;
    const k::AttentionShape shape = k::AttentionShape::dense(1, len, s.heads, s.kv_heads, d);
    const std::int64_t stat = static_cast<std::int64_t>(offset) * s.heads;
    const float* o = sv.at("attn").data() + offset * shape.ld_o;
    const float* d_o = d_attn.data() + offset * shape.ld_o;
    k::attention_delta(shape, o, d_o, delta.data() + stat, stream_);
    k::attention_backward(
        shape, sv.at("q").data() + offset * shape.ld_q, sv.at("k").data() + offset * shape.ld_k,
        sv.at("v").data() + offset * shape.ld_v, mask(len, s.causal), sv.at("lse").data() + stat,
        delta.data() + stat, d_o, st.grads["dq"].data() + offset * shape.ld_q,
        st.grads["dk"].data() + offset * shape.ld_k, st.grads["dv"].data() + offset * shape.ld_v,
        stream_);
    offset += len;
  }
}

DeviceMatrix LayerRunner::forward(const LayerSpec& s, const DeviceTensors& p, const DeviceMatrix& x,
                                  const std::vector<int>& lengths, DeviceLayerState& st) {
  const int rows = rows_of(lengths), h = s.hidden, f = s.ffn;
  st.lengths = lengths;
  DeviceTensors& sv = st.saved;
  sv["x"] = x.clone(stream_);
  if (is_mlp(s)) {
    sv["a"] = DeviceMatrix(rows, f, stream_);
    sv["u"] = DeviceMatrix(rows, f, stream_);
    DeviceMatrix y(rows, s.out_hidden, stream_);
    xw(rows, h, f, x.data(), h, p.at("w1"), sv["a"].data(), f);
    k::bias_gelu_forward(rows, f, sv["a"].data(), nullptr, sv["u"].data(), stream_);
    xw(rows, f, s.out_hidden, sv["u"].data(), f, p.at("w2"), y.data(), s.out_hidden);
    return y;
  }
  const int d = head_dim(s), qw = s.heads * d, kw = s.kv_heads * d;
  sv["n1"] = DeviceMatrix(rows, h, stream_);
  sv["rstd1"] = DeviceMatrix(1, rows, stream_);
  k::rmsnorm_forward(rows, h, x.data(), p.at("norm1").data(), kRmsEps, sv["n1"].data(),
                     sv["rstd1"].data(), stream_);
  sv["q"] = DeviceMatrix(rows, qw, stream_);
  sv["k"] = DeviceMatrix(rows, kw, stream_);
  sv["v"] = DeviceMatrix(rows, kw, stream_);
  xw(rows, h, qw, sv["n1"].data(), h, p.at("wq"), sv["q"].data(), qw);
  xw(rows, h, kw, sv["n1"].data(), h, p.at("wk"), sv["k"].data(), kw);
  xw(rows, h, kw, sv["n1"].data(), h, p.at("wv"), sv["v"].data(), kw);
  attention_forward(s, st);
  // x2 = x + attn Wo (beta = 1 onto a copy of x: the residual for free).
  sv["x2"] = x.clone(stream_);
  xw(rows, qw, h, sv["attn"].data(), qw, p.at("wo"), sv["x2"].data(), h, 1.0f);
  sv["n2"] = DeviceMatrix(rows, h, stream_);
  sv["rstd2"] = DeviceMatrix(1, rows, stream_);
  k::rmsnorm_forward(rows, h, sv["x2"].data(), p.at("norm2").data(), kRmsEps, sv["n2"].data(),
                     sv["rstd2"].data(), stream_);
  // Gated: a = n2 W1 and g = n2 W3 side by side in one [rows, 2 ffn] buffer (the layout
  // swiglu_forward reads); plain: a alone.
  const int width = s.gated_mlp ? 2 * f : f;
  sv["a"] = DeviceMatrix(rows, width, stream_);
  sv["u"] = DeviceMatrix(rows, f, stream_);
  xw(rows, h, f, sv["n2"].data(), h, p.at("w1"), sv["a"].data(), width);
  if (s.gated_mlp) {
    xw(rows, h, f, sv["n2"].data(), h, p.at("w3"), sv["a"].data() + f, width);
    k::swiglu_forward(rows, f, sv["a"].data(), sv["u"].data(), stream_);
  } else {
    k::bias_gelu_forward(rows, f, sv["a"].data(), nullptr, sv["u"].data(), stream_);
  }
  DeviceMatrix y = sv["x2"].clone(stream_);
  xw(rows, f, h, sv["u"].data(), f, p.at("w2"), y.data(), h, 1.0f);
  return y;
}

DeviceMatrix LayerRunner::backward_input(const LayerSpec& s, const DeviceTensors& p,
                                         DeviceLayerState& st, const DeviceMatrix& dy,
                                         bool need_dx) {
  const DeviceTensors& sv = st.saved;
  DeviceTensors& w = st.grads;
  const int rows = dy.rows(), h = s.hidden, f = s.ffn;
  DeviceMatrix dx;
  if (is_mlp(s)) {
    DeviceMatrix du(rows, f, stream_);
    dy_wt(rows, f, s.out_hidden, dy.data(), s.out_hidden, p.at("w2"), du.data());
    w["da"] = DeviceMatrix(rows, f, stream_);
    k::bias_gelu_backward(rows, f, sv.at("a").data(), nullptr, du.data(), w["da"].data(), stream_);
    if (need_dx) {
      dx = DeviceMatrix(rows, h, stream_);
      dy_wt(rows, h, f, w["da"].data(), f, p.at("w1"), dx.data());
    }
  } else {
    const int d = head_dim(s), qw = s.heads * d, kw = s.kv_heads * d;
    const int width = s.gated_mlp ? 2 * f : f;
    DeviceMatrix du(rows, f, stream_);
    dy_wt(rows, f, h, dy.data(), h, p.at("w2"), du.data());
    w["da"] = DeviceMatrix(rows, width, stream_);  // [da | dg] when gated
    if (s.gated_mlp)
      k::swiglu_backward(rows, f, sv.at("a").data(), du.data(), w["da"].data(), stream_);
    else
      k::bias_gelu_backward(rows, f, sv.at("a").data(), nullptr, du.data(), w["da"].data(),
                            stream_);
    w["dn2"] = DeviceMatrix(rows, h, stream_);
    dy_wt(rows, h, f, w["da"].data(), width, p.at("w1"), w["dn2"].data());
    if (s.gated_mlp)
      dy_wt(rows, h, f, w["da"].data() + f, width, p.at("w3"), w["dn2"].data(), 1.0f);
    w["do"] = DeviceMatrix(rows, h, stream_);  // dx2: gradient at the attention residual
    k::rmsnorm_backward_input(rows, h, sv.at("x2").data(), p.at("norm2").data(),
                              sv.at("rstd2").data(), w["dn2"].data(), w["do"].data(), stream_);
    k::residual_add(static_cast<std::int64_t>(rows) * h, w["do"].data(), dy.data(), w["do"].data(),
                    stream_);
    DeviceMatrix d_attn(rows, qw, stream_);
    dy_wt(rows, qw, h, w["do"].data(), h, p.at("wo"), d_attn.data());
    attention_backward(s, st, d_attn);
    w["dn1"] = DeviceMatrix(rows, h, stream_);
    dy_wt(rows, h, qw, w["dq"].data(), qw, p.at("wq"), w["dn1"].data());
    dy_wt(rows, h, kw, w["dk"].data(), kw, p.at("wk"), w["dn1"].data(), 1.0f);
    dy_wt(rows, h, kw, w["dv"].data(), kw, p.at("wv"), w["dn1"].data(), 1.0f);
    if (need_dx) {
      dx = DeviceMatrix(rows, h, stream_);
      k::rmsnorm_backward_input(rows, h, sv.at("x").data(), p.at("norm1").data(),
                                sv.at("rstd1").data(), w["dn1"].data(), dx.data(), stream_);
      k::residual_add(static_cast<std::int64_t>(rows) * h, dx.data(), w["do"].data(), dx.data(),
                      stream_);
    }
  }
  if (s.frozen) {
    w.clear();  // nothing for W to do: free the output gradients now
  } else {
    w["dy"] = dy.clone(stream_);
  }
  return dx;
}

void LayerRunner::backward_weight(const LayerSpec& s, const DeviceLayerState& st,
                                  DeviceTensors& g) {
  if (s.frozen) return;
  const DeviceTensors& sv = st.saved;
  const DeviceTensors& w = st.grads;
  const int rows = sv.at("x").rows(), h = s.hidden, f = s.ffn;
  if (is_mlp(s)) {
    xt_dy(rows, h, f, sv.at("x"), w.at("da").data(), f, g.at("w1"));
    xt_dy(rows, f, s.out_hidden, sv.at("u"), w.at("dy").data(), s.out_hidden, g.at("w2"));
    return;
  }
  const int d = head_dim(s), qw = s.heads * d, kw = s.kv_heads * d;
  const int width = s.gated_mlp ? 2 * f : f;
  xt_dy(rows, h, qw, sv.at("n1"), w.at("dq").data(), qw, g.at("wq"));
  xt_dy(rows, h, kw, sv.at("n1"), w.at("dk").data(), kw, g.at("wk"));
  xt_dy(rows, h, kw, sv.at("n1"), w.at("dv").data(), kw, g.at("wv"));
  xt_dy(rows, qw, h, sv.at("attn"), w.at("do").data(), h, g.at("wo"));
  xt_dy(rows, h, f, sv.at("n2"), w.at("da").data(), width, g.at("w1"));
  if (s.gated_mlp) xt_dy(rows, h, f, sv.at("n2"), w.at("da").data() + f, width, g.at("w3"));
  xt_dy(rows, f, h, sv.at("u"), w.at("dy").data(), h, g.at("w2"));
  k::rmsnorm_backward_weight(rows, h, sv.at("x").data(), sv.at("rstd1").data(), w.at("dn1").data(),
                             g.at("norm1").data(), stream_);
  k::rmsnorm_backward_weight(rows, h, sv.at("x2").data(), sv.at("rstd2").data(), w.at("dn2").data(),
                             g.at("norm2").data(), stream_);
}

}  // namespace loom::exec::cuda
