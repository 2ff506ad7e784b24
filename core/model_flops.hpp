#pragma once
/// Model FLOPs: the numbers training runs are compared by (model TFLOP/s per GPU, MFU,
/// tokens/s per GPU). One counting rule, Megatron-LM's (num_floating_point_operations in
/// training.py, as Megatron-Bridge reports "model TFLOP/s/GPU"; Narayanan et al. SC'21 §5.1
/// Eq 3 without recomputation; the "model FLOPs" of PaLM, Chowdhery et al. 2022 App. B, that
/// the Llama 3 paper's MFU uses):
///
///   - only matrix multiplications count, 2 FLOPs per multiply-add; norms, softmax,
///     activations, the embedding lookup and the optimizer count nothing;
///   - per token, a transformer layer's forward is 2 x its matmul weights (Q and O: h x h;
///     K and V: h x h kv_heads/heads each; the MLP: 2 or, gated, 3 matrices of h x ffn)
///     plus the attention scores and values, 2 x 2 x s x h for a sequence of s tokens,
///     halved when the attention is causal (the LLM; an encoder's is not), over only the
///     pairs a sliding window keeps (LayerSpec::attended_pairs); a layer with
///     experts counts the MLPs of its top_k routed and its shared experts; an MLP layer
///     (a projector) is 2 x its two matrices; the LM head is 2 x h x vocab;
///   - training multiplies a layer's forward by 3 (forward, input and weight gradients)
///     when it is trainable, by 2 when it is frozen but a trainable layer upstream needs
///     its input gradients, by 1 when it is frozen with nothing to train upstream;
///   - recomputation is not model work: a run that recomputes does the same model FLOPs in
///     more time (lower MFU), as Megatron and the Llama 3 paper count.
///
/// docs/cost-model.md works the rule through for Llama 3 8B (tests/core/model_flops_test.cpp
/// checks it against Megatron-Bridge's published tokens/s and TFLOP/s).
#include <vector>

#include "core/model.hpp"
#include "core/schedule.hpp"
#include "core/workload.hpp"

namespace loom {

/// The attention core's forward FLOPs (scores and context, every head) over one
/// microbatch's sequences: 2 x attended pairs x heads x (score + value head widths).
double attention_core_flops(const LayerSpec& layer, const MicrobatchShape& shape);

/// One layer's forward model FLOPs over one microbatch's sequences (LM head included on
/// the last layer of a module with a vocabulary).
double layer_forward_flops(const Model& model, int global_layer, const MicrobatchShape& shape);

/// Forward + backward multiplier of a layer under the rule above: 3, 2 or 1.
int training_flops_multiplier(const Model& model, int global_layer);

/// Model FLOPs one compute op does on each GPU of its rank: its layers' forward model FLOPs
/// over its microbatch (the samples of `rank`'s replica), times what its pass does of the
/// training multiplier (F 1, B multiplier - 1, I 1 and W 1 where the multiplier has them),
/// over the rank's tp GPUs and cp ranks. The parts of a layer pass split around a
/// context-parallel exchange (Compute::continues) count nothing, its last part counts it
/// whole; a redundant copy counts (the GPU does the work). Summed over every op of an
/// unfolded schedule without redundant copies, times tp, it is iteration_work's count.
double compute_op_flops(const Schedule& schedule, const Model& model,
                        const std::vector<Sample>& samples, RankId rank, const Compute& op);

/// Model FLOPs and LLM tokens of one training iteration: every sample the schedule
/// assigns, in every replica (the replicas folded away included).
struct IterationWork {
  double model_flops = 0;
  double tokens = 0;  ///< tokens the model's sink (the LLM) processes
};
IterationWork iteration_work(const Schedule& schedule, const Model& model,
                             const std::vector<Sample>& samples);

/// The rates runs are compared by, per GPU of the job.
struct TrainingRates {
  int gpus = 0;  ///< GPUs the schedule runs on (replicas folded away included)
  double model_flops = 0;
  double tflops_per_gpu = 0;        ///< model FLOPs / iteration time / GPUs, in 10^12
  double mfu = 0;                   ///< model FLOP/s per GPU / the GPU's dense peak
  double tokens_per_s_per_gpu = 0;  ///< LLM tokens / iteration time / GPUs
};
/// `peak_flops`: the GPU's dense peak for the run's precision (cluster.peak_flops).
TrainingRates training_rates(const Schedule& schedule, const IterationWork& work,
                             double iteration_time_s, double peak_flops);

}  // namespace loom
