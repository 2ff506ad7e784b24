#pragma once
/// Model description: a multimodal LLM as a DAG of modules (modality encoders, projectors,
/// the LLM), each a stack of layers with shapes and a frozen flag per layer.
///
/// Glossary (used across Loom):
///   module      one named component (e.g. "vision", "projector", "llm")
///   layer       one transformer block (or projector MLP) inside a module
///   global layer index   position of a layer in the model's topological layer order
///                        (modules in topological order, layers in order inside each)
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/index.hpp"
#include "core/routing.hpp"

namespace loom {

enum class ModuleKind : std::uint8_t { kEncoder, kProjector, kLlm };
enum class LayerKind : std::uint8_t { kTransformer, kMlp };

const char* to_string(ModuleKind kind);
const char* to_string(LayerKind kind);

/// What a layer keeps for its backward (cost.recompute, or a module's own `recompute`):
/// everything, all but the attention core, or only its input (core/layer_kernels.hpp).
enum class Recompute : std::uint8_t { kNone, kSelective, kFull };
const char* to_string(Recompute recompute);  ///< "none", "selective", "full"

/// The submodules selective recompute re-runs before a layer's backward: Megatron-Core's
/// `recompute_modules` (TransformerConfig; its default is core_attn alone). core_attn and
/// mlp are checkpointed (their inputs kept, their insides re-run); layernorm, moe_act and
/// mla_up_proj discard their outputs and recompute them (output-discarding checkpointing).
enum class RecomputeModule : std::uint8_t {
  kCoreAttention,
  kLayerNorm,
  kMoeActivation,
  kMlp,
  kMlaUpProjection
};
/// "core_attn", "layernorm", "moe_act", "mlp", "mla_up_proj"
const char* to_string(RecomputeModule module);
/// Every module Loom models, in the order lists print them.
inline constexpr RecomputeModule kRecomputeModules[] = {
    RecomputeModule::kCoreAttention, RecomputeModule::kLayerNorm, RecomputeModule::kMoeActivation,
    RecomputeModule::kMlp, RecomputeModule::kMlaUpProjection};

struct RecomputeModules {
  std::uint8_t bits = 1;  ///< core_attn: Megatron-Core's default
  static RecomputeModules none() { return {0}; }
  bool has(RecomputeModule m) const { return (bits >> static_cast<int>(m)) & 1; }
  void add(RecomputeModule m) { bits |= static_cast<std::uint8_t>(1 << static_cast<int>(m)); }
  bool operator==(const RecomputeModules&) const = default;
};

/// Shapes of one layer. A transformer layer has attention (heads, kv_heads) and an MLP
/// (ffn, gated = SwiGLU-style three matrices); an MLP layer (a projector) maps
/// `hidden` -> `ffn` -> `out_hidden` with two matrices.
struct LayerSpec {
  LayerKind kind = LayerKind::kTransformer;
  int hidden = 0;    ///< model width h
  int ffn = 0;       ///< MLP inner width
  int heads = 0;     ///< attention heads (transformer only)
  int kv_heads = 0;  ///< key/value heads (GQA); == heads for plain MHA
  /// Width of one attention head; 0 = hidden / heads. Qwen3 sets it apart from the width
  /// (30B-A3B: hidden 2,048, 32 heads of 128), so Q and the attention output are
  /// heads x head_dim wide, not hidden.
  int head_dim = 0;
  bool gated_mlp = false;  ///< SwiGLU: 3 MLP matrices instead of 2
  bool causal = false;     ///< causal attention halves the score FLOPs
  int out_hidden = 0;      ///< output width (MLP layers; == hidden for transformers)
  int dtype_bytes = 2;     ///< bytes per element of weights and activations (bf16 = 2)
  bool frozen = false;     ///< no weight gradient (Bw = 0)
  bool bias = false;       ///< linear layers carry biases (GPT/BERT; Llama-style has none)
  /// Mixture of experts (docs/moe.md): > 0 replaces the MLP by `experts` routed experts of
  /// width `expert_ffn`, each token going to `top_k` of them, plus `shared_experts` experts
  /// every token goes through, after a router (h x experts). 0: a dense MLP of width ffn.
  int experts = 0;
  int top_k = 0;
  int expert_ffn = 0;
  int shared_experts = 0;
  /// Tokens an expert takes, as a multiple of its balanced share (Megatron-Core's
  /// moe_expert_capacity_factor); 0: dropless (every routed token is computed).
  double capacity_factor = 0;
  bool moe() const { return experts > 0; }
  /// Multi-head latent attention (DeepSeek-V2 §2.1, DeepSeek-V3 §2.1.1): queries through a
  /// q_lora_rank latent (0: a plain projection), keys and values through a kv_lora_rank
  /// latent plus one shared rotary key of qk_rope_head_dim; head_dim is the non-rotary
  /// query/key width, v_head_dim the value width. kv_lora_rank = 0: standard attention.
  int q_lora_rank = 0;
  int kv_lora_rank = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;
  bool mla() const { return kv_lora_rank > 0; }
  /// Sliding-window attention (GPT-OSS alternates it with full attention, its model card
  /// §2.1: a band of 128 tokens): each query attends to itself and the window - 1 tokens
  /// before it. 0: the whole (causal) sequence.
  int sliding_window = 0;
  /// GPT-OSS's attention sinks: one learned logit per head added to the softmax's
  /// denominator (heads parameters, no GEMM).
  bool attention_sinks = false;
  /// A multi-token-prediction layer (DeepSeek-V3 §2.2, its module k): before its block the
  /// RMS-normed hidden state of the layer before and the embedding of the token k ahead
  /// are concatenated and projected 2h -> h (M_k, 2h^2 parameters); after it the LM head
  /// and cross-entropy run again, the embedding and the head shared with the main model.
  bool mtp = false;
  /// Query-key pairs one sequence of s tokens computes: s^2, half of it when causal (the
  /// diagonal's s/2 left out, as everywhere in Loom); a causal window w < s keeps
  /// w s - w^2/2 (equal to s^2/2 at s = w).
  double attended_pairs(double s) const;
  /// Per head: the width queries and keys meet at, and the values' width.
  int score_head_dim() const { return head_size() + (mla() ? qk_rope_head_dim : 0); }
  int value_head_dim() const { return mla() ? v_head_dim : head_size(); }
  /// Width of one attention head.
  int head_size() const { return head_dim > 0 ? head_dim : heads > 0 ? hidden / heads : hidden; }
  /// Width of Q and of the attention output's input: heads x head_size().
  double query_width() const { return static_cast<double>(heads) * head_size(); }
  /// The module's own `recompute` (e.g. encoder full, LLM none, as heterogeneous-
  /// parallelism-megatron's Table A4 runs); unset: cost.recompute.
  std::optional<Recompute> recompute;

  /// Equal specs cost the same (AnalyticalCostModel's layer classes).
  bool operator==(const LayerSpec&) const = default;
};

/// What `layer` recomputes when cost.recompute is `global`: its module's own setting, if any.
inline Recompute effective_recompute(const LayerSpec& layer, Recompute global) {
  return layer.recompute.value_or(global);
}

/// Default tokens per encoder input item: a 448 x 448 image in 14 x 14 patches
/// (reconstruction: heterogeneous-parallelism-megatron gives no image size for its 1B/3B
/// encoders; its §1 point is that the encoder sequence is fixed by the image resolution,
/// not by the LLM context).
inline constexpr int kDefaultItemTokens = 1024;

struct Module {
  std::string name;
  ModuleKind kind = ModuleKind::kLlm;
  /// The modality whose tokens this module consumes ("vision", "audio"); "text" for the LLM.
  std::string modality = "text";
  /// Modules whose outputs feed this one (the DAG's edges). Encoders have none.
  std::vector<std::string> inputs;
  /// Output tokens per input token (a projector that merges 2x2 patches has 0.25).
  double token_ratio = 1.0;
  /// Encoders: a sample's tokens of this modality are items (images, clips) of at most
  /// this many tokens, each attended to on its own; 0 = one item per sample (the whole
  /// modality sequence, what the single-layout schedulers assume). Read by the hetero-*
  /// schedulers; projectors follow their encoder (scaled by its token_ratio), the LLM
  /// always sees one sequence per sample.
  int item_tokens = kDefaultItemTokens;
  /// LLM modules: vocabulary size; > 0 puts the (tied) embedding before the first layer
  /// and the LM head + cross-entropy after the last (analytical kernel-level costs).
  int vocab = 0;
  /// With a vocabulary: whether the LM head shares the input embedding's weights (GPT,
  /// Megatron-LM's default: a pipeline keeps a copy and all-reduces it, lowering/
  /// tied_embedding.hpp) or has its own (Llama 3, Vicuna; Megatron's
  /// --untie-embeddings-and-output-weights, Hugging Face's tie_word_embeddings = false):
  /// vocab x hidden more parameters on the last layer, no embedding all-reduce.
  bool tie_embeddings = true;
  /// Calibrated from a measurement, not from first principles: each layer's backward time
  /// as a multiple of its forward, as a paper measured it for the module (recomputation
  /// included), applied to every layer of the module that still has a backward under its
  /// frozen status. 0 = the cost model's own backward. Used
  /// where a paper's measured behaviour has no first-principles explanation, e.g. the
  /// frozen LLMs of dissertation Table 3.2, whose backward runs 3.5-10x their forward.
  double backward_over_forward = 0;
  /// How its MoE layers' router spreads tokens over the experts (core/routing.hpp).
  Routing routing;
  /// Multi-token-prediction layers at the end of `layers` (LayerSpec::mtp; `mtp_layers`).
  int mtp_layers = 0;
  std::vector<LayerSpec> layers;
};

/// One layer with its place in the model, the unit that partitioning and costs work on.
struct LayerRef {
  ModuleId module{0};
  int local_index = 0;  ///< index inside the module
};

class Model {
 public:
  Model() = default;
  /// Validates the DAG (known inputs, no cycles, modules given in topological order, every
  /// module but the sink feeding another: an encoder feeding nothing is an error) and
  /// computes the per-layer input-gradient flags. Throws InputError naming the module.
  explicit Model(std::vector<Module> modules);

  const PerModule<Module>& modules() const { return modules_; }
  const Module& module(ModuleId id) const { return modules_.at(id); }
  std::optional<ModuleId> module_index(const std::string& name) const;
  /// The modules feeding `m` (Module::inputs, resolved when the model was built).
  const std::vector<ModuleId>& inputs(ModuleId m) const { return inputs_.at(m); }

  /// All layers in topological order (the "global layer index").
  const std::vector<LayerRef>& layers() const { return layers_; }
  /// The place of a global layer: its module and its index inside it.
  const LayerRef& layer_ref(int global_index) const {
    return layers_.at(static_cast<size_t>(global_index));
  }
  const LayerSpec& layer(int global_index) const;
  /// The module a global layer belongs to.
  ModuleId module_of(int global_index) const { return layer_ref(global_index).module; }
  int num_layers() const { return isize(layers_); }

  /// p(L) of dissertation Eq 3.3: true when layer L or any layer upstream of it (across
  /// modules, following the DAG's edges) has trainable parameters. A layer with p(L) false
  /// needs no backward at all; with p(L) true it backpropagates input gradients (Bd).
  bool has_trainable_upstream(int global_index) const {
    return trainable_upstream_.at(LayerId{global_index});
  }
  /// Whether layer L's input needs its gradient: some layer strictly upstream of L is
  /// trainable (p of L's producers). A trainable projector after a frozen encoder has
  /// p(L) true but no use for dL/dx.
  bool input_needs_gradient(int global_index) const {
    return input_needs_gradient_.at(LayerId{global_index});
  }
  /// Whether any layer of the model is trainable (otherwise there is no backward pass).
  bool any_trainable() const;

 private:
  /// Throws InputError naming a module (other than the one sink) that no module consumes.
  void check_every_branch_reaches_the_sink() const;

  PerModule<Module> modules_;
  PerModule<std::vector<ModuleId>> inputs_;
  std::vector<LayerRef> layers_;
  PerLayer<bool> trainable_upstream_;
  PerLayer<bool> input_needs_gradient_;
};

/// Modules that set their own `recompute`, name -> "none" / "selective" / "full" (for the
/// cost model's description in metrics.json).
std::map<std::string, std::string> module_recompute(const Model& model);

/// Parameter count of one layer (weights only; biases and norms are below 0.1%): with
/// experts, all of them, the shared ones and the router.
double layer_parameters(const LayerSpec& layer);
/// One linear projection of a transformer layer's attention, `in` x `out`; tensor
/// parallelism splits its output (column-parallel), its input (row-parallel) or neither
/// (MLA's down projections, replicated).
struct AttentionProjection {
  const char* name;
  double in = 0, out = 0;
  enum Split : std::uint8_t { kColumns, kRows, kNone } split = kColumns;
  bool up = false;  ///< MLA's up projections, latent -> per-head Q, K, V (`mla_up_proj`)
};
/// Standard attention: "qkv" (h -> Q, K, V), "attention output" (heads x head_dim -> h).
/// MLA: "q down", "q up" (or "q"), "kv down", "kv up", "attention output".
std::vector<AttentionProjection> attention_projections(const LayerSpec& layer);

/// The routed experts' part of layer_parameters(): what expert parallelism shards.
double expert_parameters(const LayerSpec& layer);
/// layer_parameters() of one rank of an expert-parallel group of `ep`: 1/ep of the routed
/// experts, everything else whole.
double rank_layer_parameters(const LayerSpec& layer, int ep);

}  // namespace loom
