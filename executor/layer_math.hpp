#pragma once
/// The model's math on the host, one layer at a time, with backward split the way the
/// schedules split it (zero-bubble / dissertation §4.5: Bd then Bw):
///   layer_forward          F: y from x, keeping what backward needs
///   layer_backward_input   I (Bd): dx from dy, keeping the output gradients W needs
///   layer_backward_weight  W (Bw): accumulates dW = X^T dY (and norm gains) from them
/// so a deferred W really runs later, on state I left behind.
///
/// Transformer layer (pre-norm, as Llama / Qwen2-ViT):
///   n1 = RMSNorm(x) g1;  q,k,v = n1 Wq, n1 Wk, n1 Wv;  a = Attention(q,k,v) (per sample,
///   per head, GQA, causal if the layer is);  x2 = x + a Wo;  n2 = RMSNorm(x2) g2;
///   gated: u = silu(n2 W1) * (n2 W3), else u = gelu(n2 W1);  y = x2 + u W2
/// MLP layer (projector): y = gelu(x W1) W2, hidden -> ffn -> out_hidden.
/// A microbatch is packed: the rows of all its samples, `lengths` tokens each; attention
/// never crosses samples.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/model.hpp"
#include "executor/moe_math.hpp"
#include "executor/tensor.hpp"

namespace loom::exec {

/// Parameter names and shapes of a layer: "norm1" [1,h], "wq" [h, heads*d], "wk"/"wv"
/// [h, kv_heads*d], "wo" [heads*d, h], "norm2" [1,h], "w1" [h,ffn], "w3" [h,ffn] (gated),
/// "w2" [ffn,h]; MLP layers "w1" [hidden,ffn], "w2" [ffn,out_hidden].
/// `head_dim` 0 means hidden / heads; a tensor-parallel shard (executor/profile.hpp) keeps
/// the full model's head width with fewer heads. A mixture-of-experts layer has the router,
/// the experts `experts` holds and the shared experts instead of w1, w3, w2
/// (executor/moe_math.hpp).
LayerTensors zero_parameters(const LayerSpec& spec, int head_dim = 0,
                             const ExpertGroup& experts = {});
/// Deterministic initialisation from (seed, global layer, name, element): weights uniform
/// with variance 1/fan_in, gains 1 + 0.1 u. An expert's weights are the same on any rank.
LayerTensors init_parameters(const LayerSpec& spec, int layer, std::uint64_t seed, int head_dim = 0,
                             const ExpertGroup& experts = {});
/// Throws InputError (naming `where`) when the shapes cannot be run (hidden not divisible
/// by heads, heads not by kv_heads, non-positive sizes).
void check_executable(const LayerSpec& spec, const std::string& where);
/// Width of a layer's input and output rows.
int input_width(const LayerSpec& spec);
int output_width(const LayerSpec& spec);

/// Which key rows the query rows of each sample attend to, by token position: a sample's
/// own rows (`self`), or under context parallelism one rank's query rows against the key
/// rows of every rank (executor/ring_attention.hpp). Causal masks compare positions.
struct AttentionRows {
  std::vector<int> q_lengths, k_lengths;  ///< rows per sample
  std::vector<int> q_pos, k_pos;          ///< per row: the token's position in its sample
  static AttentionRows self(const std::vector<int>& lengths);
};

/// What forward keeps for backward, and what I keeps for W.
struct LayerState {
  LayerTensors saved;
  std::vector<Matrix> probs;  ///< attention probabilities per (sample, head)
  LayerTensors grads;         ///< output gradients for W (filled by backward_input)
  std::vector<int> lengths;   ///< rows per sample the layer saw
  AttentionRows rows;         ///< the keys its attention read (transformer layers)
  MoeState moe;               ///< a mixture-of-experts layer's router and experts
};

Matrix layer_forward(const LayerSpec& spec, const LayerTensors& params, const Matrix& x,
                     const std::vector<int>& lengths, LayerState* state);

/// A transformer layer's forward in two halves around the attention core (context
/// parallelism: other ranks' K and V arrive in between). layer_forward_qkv runs the first
/// norm and the Q, K, V projections and keeps them (state->saved "q", "k", "v");
/// layer_forward_attend attends the kept queries to keys `k`, values `v` (rows `rows`),
/// then runs the output projection and the MLP, and returns y. With the layer's own K, V
/// and AttentionRows::self the two are layer_forward.
void layer_forward_qkv(const LayerTensors& params, const Matrix& x, LayerState* state);
Matrix layer_forward_attend(const LayerSpec& spec, const LayerTensors& params, const Matrix& x,
                            const Matrix& k, const Matrix& v, const AttentionRows& rows,
                            LayerState* state);
/// The second half of layer_forward_attend when the attention core ran elsewhere
/// (DeepSpeed-Ulysses: every rank attends its heads over the whole sequence;
/// HeadExchange in executor/ring_attention.hpp): `attn` is the core's output for the rank's rows,
/// [rows, heads * d]; the output projection, the second norm and the MLP follow.
Matrix layer_forward_from_attention(const LayerSpec& spec, const LayerTensors& params,
                                    const Matrix& x, Matrix attn, LayerState* state);
/// dy -> dx (returned; empty when !need_dx). Keeps W's inputs in state->grads unless the
/// layer is frozen.
Matrix layer_backward_input(const LayerSpec& spec, const LayerTensors& params, LayerState& state,
                            const Matrix& dy, const std::vector<int>& lengths, bool need_dx);
/// Accumulates the layer's weight gradients into `grads` (shaped as zero_parameters).
void layer_backward_weight(const LayerSpec& spec, const LayerState& state, LayerTensors& grads);

/// A transformer layer's backward-input in the parts context parallelism splits it into:
/// layer_backward_to_attention runs the MLP, second norm and output projection backward
/// and returns the attention output's gradient; layer_backward_from_qkv takes the
/// gradients of the rank's own Q, K, V rows and runs the projections and first norm
/// backward, returning dx (empty when !need_dx). Both keep what W needs in state.grads.
Matrix layer_backward_to_attention(const LayerSpec& spec, const LayerTensors& params,
                                   LayerState& state, const Matrix& dy);
Matrix layer_backward_from_qkv(const LayerTensors& params, LayerState& state, Matrix dq, Matrix dk,
                               Matrix dv, bool need_dx);
/// The attention core's backward on the layer's own keys, then layer_backward_from_qkv.
Matrix layer_backward_from_attention(const LayerSpec& spec, const LayerTensors& params,
                                     LayerState& state, const Matrix& dattn, bool need_dx);

/// A transformer layer's forward in the parts expert parallelism splits it into:
/// layer_forward_attention runs the attention block and the second norm and returns x2
/// (the residual stream before the MLP; n2 kept in state->saved); the MoE pieces
/// (executor/moe_math.hpp) run between. layer_backward_from_n2 takes the MLP input's
/// gradient dn2 (and dy, the residual's) and returns the attention output's gradient, as
/// layer_backward_to_attention does after its MLP.
Matrix layer_forward_attention(const LayerSpec& spec, const LayerTensors& params, const Matrix& x,
                               const Matrix& keys, const Matrix& values, const AttentionRows& rows,
                               LayerState* state);
Matrix layer_backward_from_n2(const LayerTensors& params, LayerState& state, const Matrix& dy,
                              Matrix dn2);

/// Attention over packed samples (exposed for tests): q [T, heads*d], k/v [T, kv*d].
Matrix attention_forward(const Matrix& q, const Matrix& k, const Matrix& v,
                         const std::vector<int>& lengths, int heads, int kv_heads, bool causal,
                         std::vector<Matrix>* probs);
void attention_backward(const Matrix& dout, const Matrix& q, const Matrix& k, const Matrix& v,
                        const std::vector<Matrix>& probs, const std::vector<int>& lengths,
                        int heads, int kv_heads, Matrix& dq, Matrix& dk, Matrix& dv);
/// The same with queries and keys in rows of their own (AttentionRows).
Matrix attention_forward(const Matrix& q, const Matrix& k, const Matrix& v,
                         const AttentionRows& rows, int heads, int kv_heads, bool causal,
                         std::vector<Matrix>* probs);
void attention_backward(const Matrix& dout, const Matrix& q, const Matrix& k, const Matrix& v,
                        const std::vector<Matrix>& probs, const AttentionRows& rows, int heads,
                        int kv_heads, Matrix& dq, Matrix& dk, Matrix& dv);

}  // namespace loom::exec
