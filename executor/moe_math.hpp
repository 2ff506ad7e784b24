#pragma once
/// A mixture-of-experts MLP on the host (docs/moe.md), in the three pieces the expert-
/// parallel all-to-alls cut it into:
///
///   route    logits = n2 Wr, p = softmax(logits) per token, its top_k experts (ties to the
///            lower index); each routed copy (token, slot) goes to the member of the
///            expert-parallel group that owns its expert: expert e to member e / (E / ep)
///   experts  each member runs its experts' MLPs (gated like the layer: silu(x W1) * x W3,
///            then W2) over the copies it received, and returns the outputs in their order
///   combine  y = x2 + sum over slots of p[t, e_j] h_tj + the shared experts' MLP of n2
///
/// The backward mirrors it: the combine's gradient sends p dy to the owners, the experts'
/// backward returns dX, and the route's backward adds them, the router's softmax gradient
/// (through dy . h of each chosen expert) and the shared experts' into dn2. Weight gradients
/// (router, each owned expert, the shared experts) wait for W, as the layers' do.
/// Parameters: "router" [h, E]; "expert<e>.w1", ".w3" (gated), ".w2" for the owned e;
/// "shared.w1", ".w3", ".w2" (width shared_experts x expert_ffn) when it has them.
#include <string>
#include <vector>

#include "core/model.hpp"
#include "executor/tensor.hpp"

namespace loom::exec {

/// Which experts a rank holds: member `member` of an expert-parallel group of `ep`.
struct ExpertGroup {
  int ep = 1;
  int member = 0;
  int first(const LayerSpec& l) const { return member * (l.experts / ep); }
  int count(const LayerSpec& l) const { return l.experts / ep; }
  int owner(const LayerSpec& l, int expert) const { return expert / (l.experts / ep); }
};

/// Token copies one member sends another (or returns): the expert of each copy (empty on
/// the way back) and its rows.
struct TokenCopies {
  std::vector<int> expert;
  Matrix rows;
};
/// One buffer per member of the group, in member order.
using Exchange = std::vector<TokenCopies>;

/// Flattened for a transport: [copies, expert ids..., rows...] (ids as floats: exact).
std::vector<float> pack(const TokenCopies& copies);
TokenCopies unpack(const std::vector<float>& flat, int width, bool with_experts);

/// What one MoE layer keeps between its pieces and for its backward, on one rank.
struct MoeState {
  ExpertGroup group;                   ///< the experts this rank holds (set by moe_route)
  Matrix probs;                        ///< [T, E] router softmax
  std::vector<int> chosen;             ///< [T x top_k] expert of each copy
  std::vector<std::vector<int>> sent;  ///< per owner: the copies (t x top_k + slot) sent, in order
  Exchange returned;                   ///< per owner: the experts' outputs of those copies
  // The owner's side: the copies received from each member, concatenated in member order.
  std::vector<int> received_from;  ///< copies per source member
  TokenCopies received;
  Matrix a, g, u;     ///< fc1 (and gate) outputs and the activation, per copy
  Matrix da, dg, dh;  ///< their gradients and the output gradient (for W)
  // The shared experts (over every token) and the router, for W.
  Matrix shared_a, shared_g, shared_u, shared_da, shared_dg, shared_dy, dlogits;
};

/// One MLP (gated like the layer: act(x W1) [* x W3], then W2), keeping a = x W1, g = x W3
/// and u = the activation's output; its backward to the input, keeping da (and dg). `w3`
/// and `g` are unused when the layer is not gated. The dense MLP and every expert run them.
Matrix mlp_forward(const LayerSpec& l, const Matrix& x, const Matrix& w1, const Matrix* w3,
                   const Matrix& w2, Matrix& a, Matrix& g, Matrix& u);
Matrix mlp_backward(const LayerSpec& l, const Matrix& dy, const Matrix& w1, const Matrix* w3,
                    const Matrix& w2, const Matrix& a, const Matrix& g, Matrix& da, Matrix& dg);

/// Router and dispatch: the copies for each owner (the sender's own included).
Exchange moe_route(const LayerSpec& l, const LayerTensors& p, const Matrix& n2,
                   const ExpertGroup& group, MoeState& st);
/// The owned experts over the copies received (one buffer per source member): the outputs
/// to return, per source.
Exchange moe_experts_forward(const LayerSpec& l, const LayerTensors& p, const Exchange& received,
                             MoeState& st);
/// y = x2 + the weighted expert outputs (returned: per owner, in the order sent) + shared.
Matrix moe_combine(const LayerSpec& l, const LayerTensors& p, const Matrix& x2, const Matrix& n2,
                   Exchange returned, MoeState& st);

/// dy -> the output gradients of the copies (p dy), per owner.
Exchange moe_combine_backward(const LayerSpec& l, const Matrix& dy, const MoeState& st);
/// The owned experts' backward: the copies' input gradients to return, per source.
Exchange moe_experts_backward(const LayerSpec& l, const LayerTensors& p, const Exchange& grads,
                              MoeState& st);
/// dn2 from the copies' input gradients (per owner, in the order sent), the router's softmax
/// and the shared experts.
Matrix moe_route_backward(const LayerSpec& l, const LayerTensors& p, const Matrix& dy,
                          const Exchange& input_grads, MoeState& st);
/// Accumulates the router's, the owned experts' and the shared experts' weight gradients.
void moe_backward_weight(const LayerSpec& l, const Matrix& n2, const MoeState& st,
                         LayerTensors& grads);

/// The whole MoE MLP on one rank holding every expert (ep 1, the sequential reference).
Matrix moe_forward_local(const LayerSpec& l, const LayerTensors& p, const Matrix& x2,
                         const Matrix& n2, MoeState& st);
Matrix moe_backward_local(const LayerSpec& l, const LayerTensors& p, const Matrix& dy,
                          MoeState& st);

/// A routed expert's weight ("expert<e>.w1"...): held by one member of each expert-parallel
/// group and reduced over the ranks holding the same experts.
inline bool is_expert_parameter(const std::string& name) {
  return name.rfind("expert", 0) == 0;
}

/// Adds the router's, the experts' (owned by `group`) and the shared experts' parameters.
void add_moe_parameters(const LayerSpec& l, const ExpertGroup& group, LayerTensors& t);

}  // namespace loom::exec
