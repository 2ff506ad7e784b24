#pragma once
/// Context parallelism in the single layout (parallel.cp, parallel.cp_comm), as
/// Megatron-Core runs it (megatron/core/transformer/dot_product_attention with
/// TransformerEngine's context-parallel attention, cp_comm_type "p2p" / "all_gather"):
///
///   - Every stage of every replica runs on cp TP groups, the CP ranks. Each sequence is cut
///     into 2 cp equal chunks and rank i holds chunks i and 2cp - 1 - i, so every rank has
///     the same causal attention work (the "zigzag" load balance). Sequences are padded to
///     a multiple of 2 cp, as Megatron's packed (THD) batches are.
///   - Activations and stage-to-stage messages of a CP rank are 1/cp of the replica's; its
///     attention work is 1/cp too (exact under the zigzag split); its linear work is priced
///     at the tokens it runs, 1/cp of every sequence (rank_linear_cost), so its GEMMs are
///     the rank's own shapes.
///   - Each transformer layer's pass is split around the exchange attention needs
///     (Compute::continues), with the rank's K/V block B = its tokens x 2 x kv_heads/tp x
///     head_dim x dtype bytes:
///       p2p forward:  pre-attention linears; then cp - 1 ring steps, each an eager Send of
///                     the K/V block in hand to the next CP rank, the attention of that block,
///                     and the Recv of the previous rank's block (so a step costs
///                     max(attention / cp, transfer of B)); the last block's attention and the
///                     post-attention linears.
///       p2p backward: post-attention linears' backward; cp - 1 ring steps passing K/V with
///                     the dK/dV accumulated so far (2B); the last block; the final hop of
///                     dK/dV (B) back to its owner; pre-attention linears' backward.
///       all-gather:   forward all-gathers K/V (cp x B per member) before the attention;
///                     backward all-gathers K/V again and reduce-scatters dK/dV after it.
///     The split of the linear work before and after attention follows the matrices'
///     FLOPs: Q, K, V projections before; output projection and MLP after.
///   - Gradients reduce over dp x cp (the lanes of the lowering), as Megatron's
///     data-parallel-with-CP group does; the distributed optimizer and FSDP shard over it.
#include <vector>

#include "core/cost_model.hpp"
#include "core/schedule.hpp"

namespace loom {

/// A layer's pass costs split into the part that grows with the square of the sequence
/// (the attention core) and the rest (linears, norms, element-wise, TP collectives). Two
/// evaluations of the cost model, on the shape and on every sequence halved (same tokens,
/// half the attention), separate them.
struct AttentionSplit {
  PassCost linear;
  PassCost attention;
};
AttentionSplit split_attention(const CostModel& cost, const Model& model, int layer,
                               const MicrobatchShape& shape, int tp);

/// A CP rank's share of every sequence of `shape`: 1/cp of it, rounded up.
MicrobatchShape cp_rank_shape(const MicrobatchShape& shape, int cp);

/// A CP rank's linear work (AttentionSplit::linear) at its own tokens, 1/cp of every
/// sequence: its GEMMs are priced at the rows the rank runs, which a TP ring exchange then
/// splits tp ways (cost.tp_overlap), not as the whole sequence's divided by cp. A cost
/// model fixed per microbatch (CostModel::prices_tokens) gives 1/cp of `whole`, the split
/// of `shape`; no pass is negative.
PassCost rank_linear_cost(const CostModel& cost, const Model& model, int layer,
                          const MicrobatchShape& shape, int tp, int cp,
                          const AttentionSplit& whole);

/// `a` x fa + `b` x fb, pass by pass.
PassCost scale_add(const PassCost& a, double fa, const PassCost& b, double fb);

/// Each sequence padded to a multiple of 2 x cp tokens.
MicrobatchShape pad_for_context_parallel(const MicrobatchShape& shape, int cp);

/// What one CP rank's share of a transformer layer needs beyond its PassCost.
struct ContextParallelLayer {
  PassCost attention;           ///< the rank's attention core (part of its PassCost)
  double before_attention = 0;  ///< fraction of the linear work before the attention
  double kv_block_bytes = 0;    ///< the rank's K and V for the layer (B above)
  double q_block_bytes = 0;     ///< its queries (and the attention output: as wide)
  bool exchanges() const { return kv_block_bytes > 0; }
};

/// The fraction of a transformer layer's linear FLOPs in its Q, K, V projections.
double linear_share_before_attention(const LayerSpec& layer);

}  // namespace loom
