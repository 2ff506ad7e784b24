#pragma once
/// Expert parallelism in the lowering (parallel.ep; docs/moe.md), as Megatron-Core's
/// all-to-all token dispatcher runs it (megatron/core/transformer/moe/token_dispatcher.py,
/// MoEAlltoAllTokenDispatcher):
///
///   - The lanes of the lowering (replica x CP rank) fall into expert-parallel groups of ep
///     consecutive lanes; a group's ranks of one pipeline rank hold the layer's routed
///     experts between them, experts / ep each.
///   - Each MoE layer's forward is cut around two all-to-alls over that group: the work
///     before the dispatch (attention, router, permute), the dispatch of every routed token
///     copy to the rank holding its expert (bytes = tokens x top_k x hidden x dtype per
///     member, bytes/ep to each), the experts' GEMMs, the combine that brings the results
///     back (the same bytes), and the unpermute and shared experts. The backward runs the
///     mirror image (combine's gradient, experts' backward, dispatch's gradient, the rest);
///     a split backward's weight-gradient half (W) needs no tokens moved.
///   - The routed experts' gradients reduce over the lanes holding the same experts (lane
///     mod ep), everything else's over all lanes (pass_placement.cpp).
#include "core/cost_model.hpp"

namespace loom {

/// What one MoE layer needs beyond its PassCost on one rank for one microbatch.
struct ExpertParallelLayer {
  MoePhases phases;           ///< the PassCost's work between and after the all-to-alls
  double dispatch_bytes = 0;  ///< one all-to-all's buffer per member; 0: a dense layer
  bool exchanges() const { return dispatch_bytes > 0; }
};

/// Bytes of one dispatch (or combine) all-to-all's buffer on a rank whose share of the
/// microbatch is `tokens`: every token copied to each of its top_k experts.
double dispatch_bytes(const LayerSpec& layer, double tokens);

}  // namespace loom
