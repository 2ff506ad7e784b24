#include "core/layer_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <optional>

namespace loom {

const char* to_string(KernelPass pass) {
  switch (pass) {
    case KernelPass::kForward:
      return "F";
    case KernelPass::kInputGrad:
      return "I";
    case KernelPass::kWeightGrad:
      return "W";
  }
  return "?";
}

const char* to_string(KernelBound bound) {
  switch (bound) {
    case KernelBound::kCompute:
      return "compute";
    case KernelBound::kMemory:
      return "memory";
    case KernelBound::kCommunication:
      return "communication";
  }
  return "?";
}

const char* to_string(Fp8Recipe recipe) {
  switch (recipe) {
    case Fp8Recipe::kOff:
      return "off";
    case Fp8Recipe::kDelayed:
      return "delayed";
    case Fp8Recipe::kCurrent:
      return "current";
    case Fp8Recipe::kMx:
      return "mx";
  }
  return "?";
}

const char* to_string(TpOverlap overlap) {
  switch (overlap) {
    case TpOverlap::kIdeal:
      return "ideal";
    case TpOverlap::kRingExchange:
      return "ring-exchange";
    case TpOverlap::kRingExchangeAggregate:
      return "ring-exchange-aggregate";
  }
  return "?";
}

namespace {

constexpr KernelPass kF = KernelPass::kForward;
constexpr KernelPass kI = KernelPass::kInputGrad;
constexpr KernelPass kW = KernelPass::kWeightGrad;

/// One GEMM as a TP ring exchange runs it (TpOverlap): over `chunks` equal row chunks of the
/// tokens (1: whole), each step's chunk exchanged with the ring's neighbours in `exchange_s`.
struct RingSplit {
  int chunks = 1;
  double exchange_s = 0;
};

/// A linear layer's forward and data-gradient GEMMs under a ring exchange.
struct RowSplit {
  RingSplit forward;
  RingSplit dgrad;
};

/// How many chunks a TP ring exchange splits the GEMMs after its all-gather and before its
/// reduce-scatter into (1, 1: no ring exchange), and what one of its steps exchanges. TE's
/// `aggregate` halves the first only: its reduce-scatter ring has no aggregated form.
struct RingChunks {
  int all_gather = 1;
  int reduce_scatter = 1;
  double tokens = 0;  ///< rows of the exchanged tensors
  /// Element sizes: the gathered chunks are FP8 under FP8 (TE's all-gather buffers "use
  /// fp8 when using fp8 recipe", initialize_ub), the partial sums the layer's dtype.
  double all_gather_bytes = 0;
  double reduce_scatter_bytes = 0;
  LinkSpec link;  ///< the TP group's (NVLink within the node)
  /// The split of a GEMM after the all-gather / before the reduce-scatter of a
  /// [tokens x width] tensor.
  RingSplit after_all_gather(double width) const {
    return split(all_gather, width, all_gather_bytes);
  }
  RingSplit before_reduce_scatter(double width) const {
    return split(reduce_scatter, width, reduce_scatter_bytes);
  }

 private:
  RingSplit split(int chunks, double width, double bytes) const {
    return {chunks, chunks > 1 ? ring_step_seconds(tokens / chunks * width * bytes, link) : 0};
  }
};

RingChunks ring_chunks(TpOverlap overlap, int tp, bool sequence_parallel, double tokens,
                       double all_gather_bytes, double reduce_scatter_bytes, const LinkSpec& link) {
  if (!sequence_parallel || tp <= 1 || overlap == TpOverlap::kIdeal) return {};
  const int all_gather = overlap == TpOverlap::kRingExchangeAggregate ? std::max(1, tp / 2) : tp;
  return {.all_gather = all_gather,
          .reduce_scatter = tp,
          .tokens = tokens,
          .all_gather_bytes = all_gather_bytes,
          .reduce_scatter_bytes = reduce_scatter_bytes,
          .link = link};
}

/// `split.chunks` back-to-back GEMMs over 1/chunks of the rows each (each chunk waves over
/// the SMs alone and launches alone; at 1 the GEMM itself). In a ring exchange each step
/// after the first waits for its chunk's exchange if the previous GEMM ends first:
/// G + (chunks - 1) max(G, exchange).
double split_gemm_seconds(const GpuPerformance& gpu, GemmShape s, RingSplit split) {
  s.m /= split.chunks;
  const double chunk = gpu.gemm_seconds(s);
  return chunk + (split.chunks - 1) * std::max(chunk, split.exchange_s);
}

/// Builds the list; one GEMM of the forward brings its data-gradient (I) and
/// weight-gradient (W) GEMMs with it.
class KernelList {
 public:
  KernelList(const GpuPerformance& gpu, int dtype_bytes) : gpu_(gpu), e_(dtype_bytes) {}
  /// Linear layers in FP8 from now on: their GEMMs timed by `fp8` (FP8 operands, output in
  /// the layer's dtype), their operands cast by `recipe`.
  /// (nullptr: back to the layer's dtype.)
  void use_fp8(const GpuPerformance* fp8, Fp8Recipe recipe, int microbatches) {
    fp8_ = fp8;
    recipe_ = recipe;
    microbatches_ = std::max(1, microbatches);
  }

  /// Weight-gradient GEMMs from now on accumulate into an fp32 buffer (gradient-accumulation
  /// fusion): timed by `dense` / `fp8` (their output read and written, `out_bytes` per
  /// element). nullptr: they write the gradient in the operands' dtype.
  void fuse_wgrad(const GpuPerformance* dense, const GpuPerformance* fp8, double out_bytes) {
    wgrad_gpu_ = dense;
    wgrad_fp8_ = fp8;
    wgrad_out_ = out_bytes;
  }

  /// `split`: the GEMM over row chunks (a ring exchange), each re-reading the weight.
  void gemm(const std::string& name, KernelPass pass, GemmShape s, bool core = false,
            RingSplit split = {}) {
    const bool fused = pass == kW && wgrad_gpu_;
    const double out = fused ? wgrad_out_ : e_;
    add({name, pass, KernelBound::kCompute, s.flops(),
         s.batch * (e_ * (s.m * s.k + split.chunks * s.k * s.n) + out * s.m * s.n),
         split_gemm_seconds(fused ? *wgrad_gpu_ : gpu_, s, split), attention_core(core)});
  }
  /// A linear layer y[tokens x n] = x[tokens x k] W[k x n]: forward, dX, dW; with a bias,
  /// its gradient is a reduction over the tokens of dY (the forward add is fused into the
  /// next element-wise kernel, or added here when `bias_add`).
  /// `batch` equal linears at once (a grouped GEMM over experts).
  /// `split`: the forward and data-gradient GEMMs a TP ring exchange splits over the tokens.
  void linear(const std::string& name, double tokens, double n, double k, bool bias = false,
              bool bias_add = false, double batch = 1, RowSplit split = {}) {
    if (fp8_) {
      fp8_linear(name, tokens, n, k, batch, split);
    } else {
      gemm(name, kF, {tokens, n, k, batch}, false, split.forward);
      gemm(name + " dgrad", kI, {tokens, k, n, batch}, false, split.dgrad);
      gemm(name + " wgrad", kW, {k, n, tokens, batch});
    }
    if (bias_add) memory(name + " bias", kF, 2 * tokens * n * e_);
    if (bias) memory(name + " bias grad", kW, tokens * n * e_);
  }
  void memory(const std::string& name, KernelPass pass, double bytes, bool core = false) {
    add({name, pass, KernelBound::kMemory, 0, bytes, gpu_.memory_seconds(bytes),
         attention_core(core)});
  }
  void comm(const std::string& name, KernelPass pass, double bytes, int tp, const LinkSpec& link) {
    if (tp <= 1) return;
    add({name, pass, KernelBound::kCommunication, 0, bytes, ring_allreduce_seconds(bytes, tp, link),
         std::nullopt});
  }
  const GpuPerformance* fp8() const { return fp8_; }
  /// Kernels added from now on run in this phase of a MoE layer.
  void phase(MoePhase p) { phase_ = p; }
  /// Kernels added from now on belong to this recomputable submodule (none: nullopt).
  void recompute_module(std::optional<RecomputeModule> m) { module_ = m; }
  static std::optional<RecomputeModule> attention_core(bool core) {
    return core ? std::optional(RecomputeModule::kCoreAttention) : std::nullopt;
  }
  void add(Kernel k) {
    k.moe = phase_;
    if (!k.recompute_module) k.recompute_module = module_;
    // Kernels of one name accumulate (per-sample attention kernels of a microbatch).
    for (Kernel& existing : kernels_) {
      if (existing.name == k.name && existing.pass == k.pass) {
        existing.flops += k.flops;
        existing.bytes += k.bytes;
        existing.seconds += k.seconds;
        return;
      }
    }
    kernels_.push_back(std::move(k));
  }
  std::vector<Kernel> take() { return std::move(kernels_); }

 private:
  /// Transformer Engine's FP8 linear (its FP8 primer and `cast_transpose`): the input and,
  /// in the backward, the output gradient are each cast once into an FP8 copy and its
  /// transpose (read e bytes, write 1 + 1: the wgrad GEMM takes the transposes), current
  /// scaling reading the tensor once more for its amax first, MX writing one scale byte per
  /// 32 elements of each copy (OCP MX v1.0: an 8-bit shared exponent per 32-element block).
  /// The weight's cast runs once per step (cached across the microbatches).
  void fp8_linear(const std::string& name, double tokens, double n, double k, double batch,
                  RowSplit split) {
    const GemmShape forward{tokens, n, k, batch}, dgrad{tokens, k, n, batch},
        wgrad{k, n, tokens, batch};
    const double b = batch;
    add({name, kF, KernelBound::kCompute, forward.flops(),
         b * (tokens * k + split.forward.chunks * k * n + tokens * n * e_),
         split_gemm_seconds(*fp8_, forward, split.forward), std::nullopt});
    add({name + " dgrad", kI, KernelBound::kCompute, dgrad.flops(),
         b * (tokens * n + split.dgrad.chunks * k * n + tokens * k * e_),
         split_gemm_seconds(*fp8_, dgrad, split.dgrad), std::nullopt});
    const bool fused = wgrad_fp8_ != nullptr;
    add({name + " wgrad", kW, KernelBound::kCompute, wgrad.flops(),
         b * (tokens * k + tokens * n + k * n * (fused ? wgrad_out_ : e_)),
         (fused ? *wgrad_fp8_ : *fp8_).gemm_seconds(wgrad), std::nullopt});
    memory(name + " fp8 cast", kF, cast_bytes(b * tokens * k));
    memory(name + " weight fp8 cast", kF, cast_bytes(b * k * n) / microbatches_);
    memory(name + " grad fp8 cast", kI, cast_bytes(b * tokens * n));
  }
  double cast_bytes(double elements) const {
    double bytes = elements * (e_ + 2);  // read, write the FP8 copy and its transpose
    if (recipe_ == Fp8Recipe::kCurrent) bytes += elements * e_;  // the amax pass
    if (recipe_ == Fp8Recipe::kMx) bytes += 2 * elements / 32;   // a scale per block
    return bytes;
  }

  const GpuPerformance& gpu_;
  double e_;
  std::vector<Kernel> kernels_;
  const GpuPerformance* fp8_ = nullptr;
  const GpuPerformance* wgrad_gpu_ = nullptr;
  const GpuPerformance* wgrad_fp8_ = nullptr;
  double wgrad_out_ = 0;
  Fp8Recipe recipe_ = Fp8Recipe::kOff;
  int microbatches_ = 1;
  MoePhase phase_ = MoePhase::kOutside;
  std::optional<RecomputeModule> module_;
};

void unfused_attention(KernelList& list, const LayerSpec& l, const MicrobatchShape& shape, int tp,
                       double e) {
  const double heads = double(l.heads) / tp;
  const double d = l.head_size();
  // Unfused (Megatron-LM 2021): score and context GEMMs batched over the heads, a fused
  // scale-mask-softmax, and dropout on the probabilities, all over full s x s scores.
  for (int s : shape.sequence_lengths) {
    const double scores = heads * double(s) * s;
    list.gemm("attention scores", kF, {double(s), double(s), d, heads}, true);
    list.memory("softmax", kF, scores * 2 * e, true);
    list.memory("attention dropout", kF, scores * (2 * e + 1), true);
    list.gemm("attention context", kF, {double(s), d, double(s), heads}, true);
    // Backward: dQ, dK from the scores' gradient; dP, dV from the context's.
    list.gemm("attention scores backward", kI, {double(s), d, double(s), 2 * heads}, true);
    list.memory("softmax backward", kI, scores * 3 * e, true);
    list.memory("attention dropout backward", kI, scores * (2 * e + 1), true);
    list.gemm("attention context backward", kI, {double(s), double(s), d, heads}, true);
    list.gemm("attention context backward", kI, {double(s), d, double(s), heads}, true);
  }
}

/// A ring exchange's reduce-scatter side leaves each GPU its output rows as `chunks` partial
/// sums, one computed by each peer, which one kernel adds up (TE's CommOverlapP2P
/// split_overlap_rs: a sum over the receive buffer's chunks): read them, write the sum.
void ring_exchange_reduce(KernelList& list, const std::string& linear, double tokens, double n,
                          double e, int chunks) {
  if (chunks <= 1) return;
  const double rows = tokens / chunks;
  list.memory(linear + " ring-exchange reduce", kF, (chunks + 1) * rows * n * e);
}

/// `batch` MLPs of width f over `tokens` tokens each (fc1, activation, fc2), f split over
/// tp; a grouped GEMM when batch > 1 (the local experts), whose activation is what
/// `moe_act` recompute re-runs.
void mlp(KernelList& list, const LayerSpec& l, const std::string& name, double tokens, double f,
         int tp, double batch, RingChunks ring = {}) {
  const double gate = l.gated_mlp ? 2 : 1;
  const double e = l.dtype_bytes;
  const double elements = batch * tokens * f / tp;
  list.linear(name + " fc1", tokens, f * gate / tp, l.hidden, l.bias, false, batch,
              {.forward = ring.after_all_gather(l.hidden), .dgrad = {}});
  // The dense MLP's activation keeps its historical name ("swiglu"), as `loom cost` prints it.
  const std::string activation =
      (name == "mlp" ? "" : name + " ") + (l.gated_mlp ? "swiglu" : "bias + gelu");
  if (name == "experts") list.recompute_module(RecomputeModule::kMoeActivation);
  list.memory(activation, kF, elements * (gate + 1) * e);
  list.memory(activation + " backward", kI, elements * (2 * gate + 1) * e);
  if (name == "experts") list.recompute_module(std::nullopt);
  list.linear(
      name + " fc2", tokens, l.hidden, f / tp, l.bias, false, batch,
      {.forward = ring.before_reduce_scatter(l.hidden), .dgrad = ring.after_all_gather(l.hidden)});
  ring_exchange_reduce(list, name + " fc2", tokens, l.hidden, e, ring.reduce_scatter);
}

/// A MoE layer's MLP (docs/moe.md) on one rank for its T tokens: the router, the tokens
/// permuted into expert order (before the dispatch all-to-all), the local experts' grouped
/// GEMMs over the tokens routed to them (balanced: T x top_k x ep / experts each), the
/// results unpermuted and weighted by their routing probabilities (after the combine), and
/// the shared experts over every token. The router stays in the layer's dtype (Transformer
/// Engine does not run it in FP8).
///
/// With tp > 1 the experts' GEMMs split over the rank's TP group (expert tensor parallelism
/// equal to tp, Megatron-Core's default). Each GPU routes its own tokens (`Tr`: 1/tp of them
/// under sequence parallelism). Under expert parallelism (Megatron-Core's all-to-all
/// dispatcher) it also permutes and dispatches only those, and the TP group all-gathers
/// the tokens its peers sent before the experts and reduce-scatters their outputs after;
/// without it (the all-gather dispatcher) the layer's input is gathered whole first.
void mixture_of_experts(KernelList& list, const LayerSpec& l, double T, double Tr, int tp,
                        const LinkSpec& intra, const LayerKernelOptions& o) {
  const double e = l.dtype_bytes;
  const double h = l.hidden;
  const double E = l.experts;
  const double k = l.top_k;
  const double routed = T * k;  // token copies this rank sends and, balanced, computes
  const double local_experts = E / o.expert_parallel;
  const bool dispatched = o.expert_parallel > 1;
  const double permuted = dispatched ? Tr : T;  // tokens one GPU permutes and unpermutes
  const GpuPerformance* fp8 = list.fp8();
  list.use_fp8(nullptr, Fp8Recipe::kOff, 1);
  list.linear("router", Tr, E, h);
  // Softmax and top-k over the logits in fp32 (Megatron's router), and their backward.
  list.memory("router softmax + top-k", kF, Tr * E * (e + 4 + 4));
  list.memory("router softmax + top-k backward", kI, Tr * E * (4 + 4 + e));
  list.use_fp8(fp8, o.fp8, o.microbatches);
  list.memory("token permute", kF, permuted * (1 + k) * h * e);
  list.memory("token permute backward", kI, permuted * (1 + k) * h * e);
  list.phase(MoePhase::kExperts);
  const std::string etp_comm = "etp all-gather + reduce-scatter (experts)";
  if (dispatched) list.comm(etp_comm, kF, routed * h * e, tp, intra);
  mlp(list, l, "experts", routed / local_experts, l.expert_ffn, tp, local_experts);
  if (dispatched) list.comm(etp_comm, kI, routed * h * e, tp, intra);
  list.phase(MoePhase::kCombined);
  // Unpermute: read the expert outputs and their probabilities, write the weighted sum.
  list.memory("token unpermute", kF, permuted * ((1 + k) * h * e + k * 4));
  list.memory("token unpermute backward", kI, 2 * permuted * (1 + k) * h * e);
  if (l.shared_experts > 0)
    mlp(list, l, "shared experts", T, double(l.shared_experts) * l.expert_ffn, tp, 1);
  list.phase(MoePhase::kOutside);
}

}  // namespace

std::vector<Kernel> layer_kernels(const LayerSpec& l, const MicrobatchShape& shape, int tp,
                                  const GpuPerformance& gpu, const LinkSpec& intra,
                                  const LayerKernelOptions& o) {
  KernelList list(gpu, l.dtype_bytes);
  // FP8 covers a transformer layer's four linears, as Megatron's TE layers run them; the
  // embedding, the LM head and a projector stay in the layer's dtype.
  std::optional<GpuPerformance> fp8;
  if (o.fp8 != Fp8Recipe::kOff && l.kind == LayerKind::kTransformer)
    fp8.emplace(gpu.spec(), 1, l.dtype_bytes);
  // Gradient-accumulation fusion: each wgrad GEMM reads and writes the fp32 buffer (beta =
  // 1) as its output; the embedding's gradient is still added apart (below).
  const bool fused = o.gradient_accumulation_fusion && o.gradient_bytes > 0;
  const int buffer_bytes = static_cast<int>(2 * o.gradient_bytes);
  std::optional<GpuPerformance> wgrad_gpu, wgrad_fp8;
  if (fused) {
    wgrad_gpu.emplace(gpu.spec(), l.dtype_bytes, buffer_bytes);
    if (fp8) wgrad_fp8.emplace(gpu.spec(), 1, buffer_bytes);
    list.fuse_wgrad(&*wgrad_gpu, wgrad_fp8 ? &*wgrad_fp8 : nullptr, buffer_bytes);
  }
  const double e = l.dtype_bytes;
  const double T = shape.total_tokens();
  const double h = l.hidden;
  const double t = tp;
  // Tokens an element-wise kernel outside the TP region touches: all of them, or 1/tp
  // under sequence parallelism.
  const double Tr = o.sequence_parallel ? T / t : T;
  const std::string tp_comm =
      o.sequence_parallel ? "tp reduce-scatter + all-gather" : "tp all-reduce";
  if (o.vocab_in > 0) {
    list.memory("embedding", kF, 2 * T * h * e);
    list.comm(tp_comm + " (embedding)", kF, T * h * e, tp, intra);
    list.memory("embedding grad", kW, 2 * T * h * e);
  }
  if (l.mtp) {
    // DeepSeek-V3 §2.2: the embedding of the token ahead, both inputs RMS-normed, their
    // concatenation projected 2h -> h (replicated over TP: the weight is small).
    list.memory("mtp embedding", kF, 2 * T * h * e);
    list.memory("mtp norms", kF, Tr * 2 * 2 * h * e);
    list.memory("mtp norms backward", kI, Tr * 3 * 2 * h * e);
    list.linear("mtp projection", T, h, 2 * h);
  }
  if (l.kind == LayerKind::kMlp) {
    list.linear("projector fc1", T, l.ffn / t, h);
    list.memory("activation", kF, T * 2 * l.ffn / t * e);
    list.memory("activation backward", kI, T * 3 * l.ffn / t * e);
    list.linear("projector fc2", T, l.out_hidden, l.ffn / t);
    list.comm(tp_comm + " (projector)", kF, T * l.out_hidden * e, tp, intra);
    list.comm(tp_comm + " (projector)", kI, T * h * e, tp, intra);
  } else {
    const double q = l.query_width();
    if (fp8) list.use_fp8(&*fp8, o.fp8, o.microbatches);
    // Megatron-Core's TE layer specs fuse a norm into the linear after it, except the
    // input norm before MLA's down projections and the pre-MLP norm before a router:
    // modules of their own, `layernorm` recompute's. A dense layer's fused pre-MLP norm
    // re-runs with its mlp.
    const auto norm = [&](const std::string& name, std::optional<RecomputeModule> module) {
      list.recompute_module(module);
      list.memory(name, kF, Tr * 2 * h * e);
      list.memory(name + " backward", kI, Tr * 3 * h * e);
      list.recompute_module(std::nullopt);
    };
    norm("layernorm 1", l.mla() ? std::optional(RecomputeModule::kLayerNorm) : std::nullopt);
    norm("layernorm 2", l.moe() ? RecomputeModule::kLayerNorm : RecomputeModule::kMlp);
    // The attention's projections before the core: Q, K, V (MLA: through their latents).
    const auto projections = attention_projections(l);
    // A ring exchange splits the GEMMs beside the layer's TP collectives: the
    // column-parallel projections that read the gathered input (not MLA's latent ones),
    // the output projection, a dense MLP (a MoE layer's experts have their own exchange).
    const RingChunks ring =
        ring_chunks(o.tp_overlap, tp, o.sequence_parallel, T, fp8 ? 1 : e, e, intra);
    for (size_t i = 0; i + 1 < projections.size(); ++i) {
      const AttentionProjection& p = projections[i];
      const bool columns = p.split == AttentionProjection::kColumns;
      const bool split = columns && !l.mla();
      // MLA's up projections (latent -> per-head Q, K, V) are `mla_up_proj` recompute's.
      list.recompute_module(p.up ? std::optional(RecomputeModule::kMlaUpProjection) : std::nullopt);
      list.linear(p.name, T, columns ? p.out / t : p.out, p.in, l.bias, l.bias, 1,
                  {.forward = split ? ring.after_all_gather(p.in) : RingSplit{}, .dgrad = {}});
    }
    list.recompute_module(std::nullopt);
    if (!o.flash_attention) {
      unfused_attention(list, l, shape, tp, e);
    } else {
      double flops = 0;
      double blocks = 0;
      const double heads = double(l.heads) / t;
      for (int s : shape.sequence_lengths) {
        flops += 2.0 * l.attended_pairs(s) * heads * (l.score_head_dim() + l.value_head_dim());
        blocks += std::ceil(s / 128.0) * heads;
      }
      list.add({"flash attention", kF, KernelBound::kCompute, flops, 0,
                gpu.flash_attention_seconds(flops, blocks, false),
                RecomputeModule::kCoreAttention});
      const double backward_flops = kAttentionBackwardFlops * flops;
      list.add({"flash attention backward", kI, KernelBound::kCompute, backward_flops, 0,
                gpu.flash_attention_seconds(backward_flops, blocks, true),
                RecomputeModule::kCoreAttention});
    }
    if (!o.flash_attention) {
      // Heads back to [tokens, hidden]: a copy in and out of the attention core.
      list.memory("context transpose", kF, 2 * T * q / t * e);
      list.memory("context transpose backward", kI, 2 * T * q / t * e);
    }
    list.linear("attention output", T, h, projections.back().in / t, l.bias, false, 1,
                {.forward = ring.before_reduce_scatter(h), .dgrad = ring.after_all_gather(h)});
    ring_exchange_reduce(list, "attention output", T, h, e, ring.reduce_scatter);
    list.comm(tp_comm + " (attention)", kF, T * h * e, tp, intra);
    list.comm(tp_comm + " (attention)", kI, T * h * e, tp, intra);
    for (const char* dropout : {"dropout + residual 1", "dropout + residual 2"}) {
      list.memory(dropout, kF, Tr * h * (3 * e + 1));
      list.memory(std::string(dropout) + " backward", kI, Tr * h * (2 * e + 1));
    }
    // A dense MLP re-runs whole under `mlp` recompute, its TP collectives included.
    if (!l.moe()) list.recompute_module(RecomputeModule::kMlp);
    if (l.moe())
      mixture_of_experts(list, l, T, Tr, tp, intra, o);
    else
      mlp(list, l, "mlp", T, l.ffn, tp, 1, ring);
    // The MLP's input gathered whole over TP (and its output reduced): the dense MLP, the
    // all-gather dispatcher, the shared experts.
    if (!l.moe() || o.expert_parallel == 1 || l.shared_experts > 0) {
      list.comm(tp_comm + " (mlp)", kF, T * h * e, tp, intra);
      list.comm(tp_comm + " (mlp)", kI, T * h * e, tp, intra);
    }
    list.recompute_module(std::nullopt);
    list.use_fp8(nullptr, Fp8Recipe::kOff, 1);
  }
  if (o.gradient_bytes > 0) {
    // Each microbatch's weight gradient (dtype) is added into the gradient buffer: read it,
    // read and write the buffer (autograd's accumulation, or Megatron's main_grad add,
    // before gradient-accumulation fusion existed).
    // Fused, only the embedding's (its gradient comes from a scatter, not a GEMM).
    const double params =
        (fused ? 0 : rank_layer_parameters(l, o.expert_parallel) / t) + double(o.vocab_in) * h / t;
    if (params > 0)
      list.memory("weight-gradient accumulation", kW, params * (e + 2 * o.gradient_bytes));
  }
  auto lm_head = [&](const std::string& prefix, int vocab) {
    const double v = vocab / t;
    list.memory(prefix + "final layernorm", kF, Tr * 2 * h * e);
    list.memory(prefix + "final layernorm backward", kI, Tr * 3 * h * e);
    list.linear(prefix + "lm head", T, v, h);
    // Vocabulary-parallel cross-entropy in fp32: read the logits, write fp32 softmax,
    // then its gradient.
    list.memory(prefix + "cross-entropy", kF, T * v * (e + 8));
    list.memory(prefix + "cross-entropy backward", kI, T * v * (4 + e));
  };
  if (o.mtp_vocab > 0) lm_head("mtp ", o.mtp_vocab);
  if (o.vocab_out > 0) lm_head("", o.vocab_out);
  return list.take();
}

double transformer_activation_bytes(const LayerSpec& l, const MicrobatchShape& shape, int tp,
                                    bool flash, bool sp, Recompute recompute, bool fp8,
                                    RecomputeModules modules) {
  const double T = shape.total_tokens();
  const double h = l.hidden;
  const double t = tp;
  const double scale = l.dtype_bytes / 2.0;
  if (recompute == Recompute::kFull) return T * h * 2 * scale / (sp ? t : 1);
  // Q, K, V and the context the output projection reads (MLA: per head at its widths, plus
  // the latents its up projections read).
  double q = l.query_width(), kv = double(l.kv_heads) * l.head_size(), context = q, latents = 0;
  if (l.mla()) {
    q = double(l.heads) * l.score_head_dim();
    kv = double(l.heads) * (l.score_head_dim() + l.value_head_dim()) / 2;
    context = double(l.heads) * l.value_head_dim();
    latents = 2.0 * (l.q_lora_rank + l.kv_lora_rank + l.qk_rope_head_dim);
  }
  const double gate = l.gated_mlp ? 2 : 1;
  // In fp16 units (2 bytes = 2): an FP8 input is half of one. The QKV input, and a dense
  // layer's fc1 input; a MoE layer's pre-MLP norm output feeds the bf16 router and stays
  // 2h (its experts keep their own FP8 copies, per routed token, in `mlp` below).
  const double fp8_replicated = fp8 ? (l.moe() ? 1 : 2) * 2 * h / 2 : 0;
  const double replicated = (10 * h - fp8_replicated) / (sp ? t : 1);
  // The MLP's tensors inside the TP region: fc1's output, the activation's output (fc2's
  // input); with experts, per routed copy (top_k per token) the permuted input too, plus
  // the router's fp32 probabilities and the shared experts' MLP.
  double mlp = 2 * l.ffn * (gate + 1) - (fp8 ? 2 * l.ffn / 2 : 0);
  if (l.moe()) {
    const double fe = l.expert_ffn;
    mlp = l.top_k * (2 * h + 2 * fe * (gate + 1) - (fp8 ? (2 * h + 2 * fe) / 2 : 0)) +
          4 * double(l.experts) + l.shared_experts * (2 * fe * (gate + 1) - (fp8 ? fe : 0));
  }
  const double fp8_out_proj = fp8 ? 2 * context / 2 : 0;  // the output projection's input
  // Selective recompute's submodules (the header says what each drops).
  const auto drops = [&](RecomputeModule m) {
    return recompute == Recompute::kSelective && modules.has(m);
  };
  double discarded = 0;  // per token, outside the TP region
  // layernorm: a separate norm's bf16 output; MLA's input norm feeds FP8 down projections
  // under FP8, which keep their own copies (h, counted above) that discarding cannot touch.
  if (drops(RecomputeModule::kLayerNorm))
    discarded += (l.moe() ? 2 * h : 0) + (l.mla() && !fp8 ? 2 * h : 0);
  if (drops(RecomputeModule::kMlp) && !l.moe()) {
    discarded += 2 * h - fp8_replicated / 2;  // fc1's input (its FP8 copy under FP8)
    mlp = 0;
  }
  if (drops(RecomputeModule::kMoeActivation) && l.moe() && !fp8) mlp -= l.top_k * 2 * l.expert_ffn;
  // mla_up_proj: the up projections' outputs after RoPE, the core attention's Q, K and V
  // (BF16 under FP8 too: the attention stays BF16); the latents they read stay.
  const double qkv = drops(RecomputeModule::kMlaUpProjection) && l.mla() ? 0 : 2 * q + 4 * kv;
  const double inside_tp = (qkv + 2 * context - fp8_out_proj + mlp) / t + latents;
  double bytes = T * (replicated - discarded / (sp ? t : 1) + inside_tp);
  // A multi-token-prediction layer also keeps its two normed inputs and their concatenation.
  if (l.mtp) bytes += T * 8 * h / (sp ? t : 1);
  if (!flash && !drops(RecomputeModule::kCoreAttention) && recompute != Recompute::kFull) {
    for (int s : shape.sequence_lengths) bytes += 5.0 * l.heads * double(s) * s / t;
  }
  return bytes * scale;
}

}  // namespace loom
