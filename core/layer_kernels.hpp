#pragma once
/// One layer as the list of kernels a Megatron-style training step runs on one GPU of its
/// tensor-parallel group, for one microbatch: GEMMs (QKV, attention output, MLP), the
/// attention core (fused FlashAttention, or unfused score GEMMs + softmax + dropout),
/// norms and element-wise kernels, the TP collectives, and, on the first / last layer of a
/// module with a vocabulary, the embedding and the LM head with its cross-entropy.
/// Each kernel belongs to a pass: forward (F), backward for inputs (I: data gradients,
/// attention backward, TP collectives of the backward) or for weights (W: weight-gradient
/// GEMMs). `loom cost` prints the list.
#include <optional>
#include <string>
#include <vector>

#include "core/gpu_perf.hpp"
#include "core/model.hpp"
#include "core/workload.hpp"

namespace loom {

enum class KernelPass : std::uint8_t { kForward, kInputGrad, kWeightGrad };
/// kOutside: before the dispatch all-to-all in the forward (attention, router, permute),
/// after it in the backward; kExperts: between dispatch and combine (the experts' grouped
/// GEMMs); kCombined: after the combine in the forward, before it in the backward
/// (unpermute, shared experts).
enum class MoePhase : std::uint8_t { kOutside, kExperts, kCombined };
enum class KernelBound : std::uint8_t { kCompute, kMemory, kCommunication };
const char* to_string(KernelPass pass);
const char* to_string(KernelBound bound);

struct Kernel {
  std::string name;
  KernelPass pass = KernelPass::kForward;
  KernelBound bound = KernelBound::kCompute;
  double flops = 0;
  double bytes = 0;  ///< memory traffic (compute, memory) or bytes on the wire (communication)
  double seconds = 0;
  /// The submodule selective recompute re-runs this kernel with, if any (model.hpp):
  /// core_attn is the attention core (scores, softmax, dropout, context; Korthikanti et al.
  /// 2022, §4.2).
  std::optional<RecomputeModule> recompute_module;
  /// Where a mixture-of-experts layer's kernel runs relative to its token all-to-alls
  /// (docs/moe.md): the lowering cuts the layer's pass there.
  MoePhase moe = MoePhase::kOutside;
};

/// FP8 training of the linear layers (cost.fp8), as Transformer Engine runs it: the GEMMs'
/// operands cast to FP8 (E4M3 forward, E5M2 gradients) with a scale per tensor, from the
/// amax history of earlier steps (delayed) or from the tensor itself (current: one more
/// read of it first), or a scale per block of 32 elements (mx: MXFP8 on Blackwell;
/// Megatron's FP8-MX on Hopper scales 1x128 / 128x128 blocks). Attention, norms and
/// element-wise kernels stay in the layer's dtype.
enum class Fp8Recipe : std::uint8_t { kOff, kDelayed, kCurrent, kMx };
const char* to_string(Fp8Recipe recipe);  ///< "off", "delayed", "current", "mx"

/// How TP communication overlaps the GEMMs under cost.tp_comm_overlap (cost.tp_overlap,
/// docs/cost-model.md). kIdeal: each GEMM priced whole, the pass's collectives hidden behind
/// its GEMMs. kRingExchange: Transformer Engine's userbuffers ring exchange (Wang et al.,
/// "Overlap Communication with Dependent Computation via Decomposition in Large Deep
/// Learning Models", ASPLOS 2023, §3; TE's CommOverlapP2P), which sequence parallelism's
/// all-gather and reduce-scatter GEMMs run as tp GEMMs of 1/tp of the tokens each, one per
/// peer's chunk, the exchange of the next chunk under the current one; the reduce-scatter
/// side then sums the tp partial chunks it received. kRingExchangeAggregate: tp / 2 GEMMs of
/// 2 / tp of the tokens (TE's `aggregate`, two chunks per step).
enum class TpOverlap : std::uint8_t { kIdeal, kRingExchange, kRingExchangeAggregate };
const char* to_string(TpOverlap overlap);  ///< "ideal", "ring-exchange", "ring-exchange-aggregate"

struct LayerKernelOptions {
  bool flash_attention = true;     ///< cost.attention = "flash" (else "unfused")
  bool sequence_parallel = false;  ///< parallel.sequence_parallel
  int vocab_in = 0;                ///< embedding of this vocabulary before the layer
  int vocab_out = 0;               ///< LM head + cross-entropy of this vocabulary after it
  int mtp_vocab = 0;  ///< a multi-token-prediction layer's own pass through the LM head
  /// Bytes per parameter of the gradient buffer each microbatch's weight gradient is
  /// added into (cost.gradient_bytes_per_param); 0 = no accumulation kernel.
  double gradient_bytes = 0;
  /// The wgrad GEMMs accumulate into that buffer themselves (Megatron-Core's
  /// gradient_accumulation_fusion): no accumulation kernel; each wgrad GEMM reads and
  /// writes its fp32 output instead of writing the weight gradient.
  bool gradient_accumulation_fusion = false;
  Fp8Recipe fp8 = Fp8Recipe::kOff;
  /// Microbatches per step: FP8 weight casts run on a step's first microbatch only (TE's
  /// `is_first_microbatch` caching), so each microbatch carries 1/microbatches of them.
  int microbatches = 1;
  /// parallel.ep: a MoE layer's routed experts over this many ranks (docs/moe.md).
  int expert_parallel = 1;
  /// TP communication overlap (cost.tp_overlap, only with cost.tp_comm_overlap): under
  /// sequence parallelism a ring exchange splits the GEMMs next to the TP collectives of a
  /// layer's attention and dense MLP (QKV and fc1 forward after the all-gather; the attention
  /// output and fc2 forward before the reduce-scatter and their data gradients after the backward's
  /// all-gather).
  TpOverlap tp_overlap = TpOverlap::kIdeal;
};

/// The layer's kernels; with options.fp8 the linear layers' GEMMs run on `gpu`'s GPU at its
/// FP8 peak (InputError naming cost.fp8 when it has none) and bring their cast kernels.
std::vector<Kernel> layer_kernels(const LayerSpec& layer, const MicrobatchShape& shape, int tp,
                                  const GpuPerformance& gpu, const LinkSpec& intra_node,
                                  const LayerKernelOptions& options);

/// Whether `recompute` re-runs kernel `k` before the backward: every forward kernel (full)
/// or the forward kernels of the listed submodules (selective).
inline bool recomputed(const Kernel& k, Recompute recompute, RecomputeModules modules = {}) {
  if (k.pass != KernelPass::kForward) return false;
  return recompute == Recompute::kFull || (recompute == Recompute::kSelective &&
                                           k.recompute_module && modules.has(*k.recompute_module));
}

/// Activation bytes one GPU keeps for the backward of a transformer layer, per microbatch
/// (Korthikanti et al. 2022, "Reducing Activation Recomputation", §4, Table 2, generalized to
/// any FFN width, gated MLPs and GQA): 10 s h of norm inputs, dropout masks and replicated
/// GEMM inputs (divided by tp under sequence parallelism) plus the tensors inside the TP
/// region, 2h + 4h_kv + 2h + 2f(g + 1) per token (24 s h for MHA with f = 4h), divided by
/// tp; unfused attention adds 5 a s^2 / tp (softmax, its dropout mask and output); selective
/// recompute of core_attn drops that term; full recompute keeps only the layer input (/tp
/// under SP). Selective `modules` drop what Megatron-Core's do (TransformerConfig's
/// recompute_modules, its TE layer specs): layernorm the outputs of the norms that are
/// modules of their own (a MoE layer's pre-MLP norm, an MLA layer's input norm: 2h each;
/// elsewhere TE fuses the norm into the next linear and there is nothing to discard; under
/// FP8 MLA's down projections keep FP8 copies of theirs and nothing is discarded there);
/// moe_act the routed experts' activation outputs (2 f_e per routed copy; none under FP8,
/// where fc2 keeps its FP8 copy instead); mlp a dense MLP's fc1 input, fc1 and activation
/// outputs; mla_up_proj an MLA layer's Q, K and V, the up projections' outputs after RoPE
/// (2q + 4kv inside the TP region; the latents stay).
/// Scaled by dtype_bytes / 2. Under FP8 the four linears keep their inputs for the weight
/// gradient as the FP8 copy (1 byte: Transformer Engine saves the cast input, not the
/// bf16 one): the QKV and fc1 inputs (2h each, replicated), the attention output
/// projection's (2h) and fc2's (2f) inside the TP region, each halved. A MoE layer's fc1
/// input slot is the pre-MLP norm's output, which the bf16 router keeps whole; its experts
/// keep their FP8 inputs per routed copy.
double transformer_activation_bytes(const LayerSpec& layer, const MicrobatchShape& shape, int tp,
                                    bool flash_attention, bool sequence_parallel,
                                    Recompute recompute, bool fp8 = false,
                                    RecomputeModules modules = {});

}  // namespace loom
