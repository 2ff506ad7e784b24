#include "core/config.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <set>
#include <sstream>

#include "core/config_reader.hpp"
#include "core/cost_analytical.hpp"
#include "core/cost_calibrated.hpp"
#include "core/cost_recompute.hpp"
#include "core/errors.hpp"
#include "core/io.hpp"
#include "core/packing.hpp"
#include "core/pipeline_layout.hpp"
#include "core/presets.hpp"
#include "core/resources.hpp"
#include "core/units.hpp"
#include "core/workload_gen.hpp"

namespace loom {
const char* to_string(CpComm comm) {
  return comm == CpComm::kP2p ? "p2p" : comm == CpComm::kAllGather ? "all-gather" : "a2a";
}

namespace {

using config::join;
using config::Reader;
using config::relative_to_config;

toml::table parse_source(const ConfigSource& source) {
  const std::string& path = source.path;
  if (!source.in_memory) check_readable_file(path, "config file");
  try {
    return source.in_memory ? toml::parse(source.document, path) : toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    const auto& src = e.source();
    throw InputError(path + ":" + std::to_string(src.begin.line) + ":" +
                     std::to_string(src.begin.column) +
                     ": TOML syntax error: " + std::string(e.description()));
  }
}

/// Applies one `a.b.c=value` override. Values parse as TOML ("8", "true", "0.5") and fall
/// back to a plain string ("phases", "0.5ms").
void apply_override(toml::table& root, const std::string& file, const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw InputError("--set '" + assignment +
                     "': expected key=value (e.g. schedule.microbatches=16)");
  }
  const std::string path = assignment.substr(0, eq);
  const std::string text = assignment.substr(eq + 1);
  std::vector<std::string> parts;
  std::stringstream ss(path);
  for (std::string p; std::getline(ss, p, '.');) parts.push_back(p);
  toml::table* table = &root;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    toml::node* next = table->get(parts[i]);
    if (!next) {
      table->insert(parts[i], toml::table{});
      next = table->get(parts[i]);
    }
    if (next->is_array_of_tables()) {
      toml::table* found = nullptr;
      ++i;
      int index = 0;
      for (toml::node& e : *next->as_array()) {
        toml::node* name = e.as_table()->get("name");
        if ((name && name->is_string() && *name->value<std::string>() == parts[i]) ||
            std::to_string(index) == parts[i]) {
          found = e.as_table();
        }
        ++index;
      }
      if (!found || i + 1 >= parts.size()) {
        throw InputError("--set '" + assignment + "': no element '" + parts[i] + "' in " + file +
                         " array '" + parts[i - 1] + "'");
      }
      table = found;
      continue;
    }
    if (!next->is_table())
      throw InputError("--set '" + assignment + "': '" + parts[i] + "' is not a table in " + file);
    table = next->as_table();
  }
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + text);
  } catch (const toml::parse_error&) {
    parsed = toml::table{{"v", text}};
  }
  table->insert_or_assign(parts.back(), *parsed.get("v"));
}

constexpr const char* kSelectiveNeedsKernelLevel =
    "selective recompute needs the kernel-level analytical model (cost.model = \"analytical\" "
    "without cost.efficiency): only it knows the attention core's share";

/// The node of `key` in the [[model.modules]] table named `name` (for error locations).
const toml::node* module_key(const toml::table& root, const std::string& name, const char* key) {
  if (const toml::array* modules = root["model"]["modules"].as_array()) {
    for (const toml::node& n : *modules) {
      const toml::table* t = n.as_table();
      if (t && (*t)["name"].value<std::string>() == name) return t->get(key);
    }
  }
  return nullptr;
}

/// `<path>recompute` (cost.recompute or a module's own).
Recompute read_recompute(Reader& r, const toml::table& t, const std::string& path) {
  const std::string v = r.string(t, path, "recompute", "none", {"none", "selective", "full"});
  return v == "full"        ? Recompute::kFull
         : v == "selective" ? Recompute::kSelective
                            : Recompute::kNone;
}

/// cost.recompute_modules: Megatron-Core's names, each once. Like Megatron, it applies only
/// to selective recompute (a config note says so when a list other than the default
/// ["core_attn"] is given and nothing is selective).
RecomputeModules read_recompute_modules(Reader& r, const toml::table& t) {
  const toml::node* node = t.get("recompute_modules");
  if (!node) return {};
  const std::string key = "cost.recompute_modules";
  std::string modelled;
  for (const RecomputeModule m : kRecomputeModules)
    modelled += (modelled.empty() ? "" : ", ") + std::string(to_string(m));
  RecomputeModules modules = RecomputeModules::none();
  for (const std::string& name : r.string_list(t, "cost.", "recompute_modules")) {
    const auto* m = std::find_if(std::begin(kRecomputeModules), std::end(kRecomputeModules),
                                 [&](RecomputeModule x) { return name == to_string(x); });
    if (m != std::end(kRecomputeModules)) {
      if (modules.has(*m)) r.fail(node, key, "'" + name + "' is listed twice");
      modules.add(*m);
    } else if (name == "moe" || name == "shared_experts") {
      r.fail(node, key,
             "'" + name +
                 "' is Megatron's but not modelled (a re-run MoE layer repeats its "
                 "all-to-alls); modelled: " +
                 modelled);
    } else {
      r.fail(node, key, "unknown module '" + name + "' (valid: " + modelled + ")");
    }
  }
  return modules;
}

int dtype_bytes(Reader& r, const toml::table& t, const std::string& path) {
  const std::string d = r.string(t, path, "dtype", "bf16", {"bf16", "fp16", "fp32"});
  return d == "fp32" ? 4 : 2;
}

/// Fails on the first of `keys` the table gives: they belong to a feature another key turns on.
void refuse_keys(Reader& r, const toml::table& t, const std::string& path,
                 std::initializer_list<const char*> keys, const std::string& why) {
  for (const char* key : keys) {
    if (t.get(key)) r.fail(t.get(key), path + key, why);
  }
}

/// Multi-head latent attention (LayerSpec::mla), read only when kv_lora_rank is given.
void read_latent_attention(Reader& r, const toml::table& t, const std::string& path,
                           LayerSpec& base) {
  if (!t.get("kv_lora_rank")) {
    refuse_keys(r, t, path, {"q_lora_rank", "qk_rope_head_dim", "v_head_dim"},
                "describes multi-head latent attention: set kv_lora_rank (e.g. 512, "
                "DeepSeek-V3's) or remove the key");
    return;
  }
  base.kv_lora_rank = r.integer(t, path, "kv_lora_rank", 0, 1);
  base.q_lora_rank = r.integer(t, path, "q_lora_rank", 0, 0);
  base.qk_rope_head_dim = r.integer(t, path, "qk_rope_head_dim", 0, 0);
  base.v_head_dim = r.integer(t, path, "v_head_dim", base.head_size(), 1);
}

/// Sliding-window attention and attention sinks (LayerSpec::sliding_window,
/// attention_sinks): the window on every layer but each full_attention_every-th (GPT-OSS:
/// 2, every second layer keeps full attention, as Megatron-Core's window_attn_skip_freq).
void read_attention_window(Reader& r, const toml::table& t, const std::string& path,
                           std::vector<LayerSpec>& layers) {
  const LayerSpec& base = layers.front();
  if (base.kind != LayerKind::kTransformer) {
    refuse_keys(r, t, path, {"sliding_window", "full_attention_every", "attention_sinks"},
                "applies to attention: only transformer layers have it");
    return;
  }
  if (t.get("attention_sinks")) {  // read only where given: `loom config` stays as it was
    const bool sinks = r.boolean(t, path, "attention_sinks", false);
    for (LayerSpec& l : layers) l.attention_sinks = sinks;
  }
  if (!t.get("sliding_window")) {
    refuse_keys(r, t, path, {"full_attention_every"},
                "chooses the layers a sliding window skips: set sliding_window (e.g. 128, "
                "GPT-OSS's) or remove the key");
    return;
  }
  const int window = r.integer(t, path, "sliding_window", 0, 1);
  if (!base.causal)
    r.fail(t.get("sliding_window"), path + "sliding_window",
           "a sliding window is modelled for causal attention only: set causal = true or remove "
           "the key");
  const int full_every = r.integer(t, path, "full_attention_every", 0, 0);
  for (int i = 0; i < isize(layers); ++i) {
    const bool full = full_every > 0 && (i + 1) % full_every == 0;
    layers[static_cast<size_t>(i)].sliding_window = full ? 0 : window;
  }
}

/// `mtp_layers` (read only where given): DeepSeek-V3's multi-token-prediction modules,
/// layers of the module's own shape (MoE if it has experts) appended after its last.
void read_multi_token_prediction(Reader& r, const toml::table& t, const std::string& path,
                                 LayerSpec layer, Module& m) {
  const toml::node* at = t.get("mtp_layers");
  if (!at) return;
  if (m.kind != ModuleKind::kLlm || m.vocab == 0)
    r.fail(at, path + "mtp_layers",
           "predicts further tokens through the LM head: only an llm module with a vocab has "
           "one; set vocab or remove the key");
  m.mtp_layers = r.integer(t, path, "mtp_layers", 0, 0);
  layer.mtp = true;
  layer.sliding_window = 0;
  layer.attention_sinks = m.layers.front().attention_sinks;
  for (int i = 0; i < m.mtp_layers; ++i) m.layers.push_back(layer);
}

/// A transformer module's mixture of experts (LayerSpec::experts; docs/moe.md). Its keys
/// are read only when `experts` is given, so a dense module's `loom config` is unchanged.
void read_experts(Reader& r, const toml::table& t, const std::string& path, LayerSpec& base) {
  if (!t.get("experts")) {
    refuse_keys(r, t, path,
                {"top_k", "expert_ffn", "shared_experts", "dense_layers", "routing", "routing_seed",
                 "capacity_factor"},
                "describes a mixture of experts: set experts (the routed experts per layer) or "
                "remove the key");
    return;
  }
  if (base.kind != LayerKind::kTransformer)
    r.fail(t.get("experts"), path + "experts",
           "only transformer layers have an MLP to replace by experts");
  base.experts = r.integer(t, path, "experts", 0, 2);
  base.top_k = r.integer(t, path, "top_k", 0, 1);
  if (base.top_k == 0) r.fail_missing(t, path, "top_k", "required with experts (e.g. 8)");
  if (base.top_k > base.experts)
    r.fail(t.get("top_k"), path + "top_k",
           std::to_string(base.top_k) + " experts per token, but the layer has only " +
               std::to_string(base.experts) + ": lower top_k");
  base.expert_ffn = r.integer(t, path, "expert_ffn", 0, 1);
  if (base.expert_ffn == 0)
    r.fail_missing(t, path, "expert_ffn", "required with experts (each expert's MLP width)");
  base.shared_experts = r.integer(t, path, "shared_experts", 0, 0);
  if (t.get("capacity_factor"))
    base.capacity_factor = r.number(t, path, "capacity_factor", 0, true);
}

Module read_module(Reader& r, const toml::table& t, int index) {
  Module m;
  const std::string anon = "model.modules." + std::to_string(index) + ".";
  m.name = r.string(t, anon, "name", "");
  if (m.name.empty()) r.fail(&t, anon + "name", "every module needs a name");
  const std::string path = "model.modules." + m.name + ".";

  std::optional<ModulePreset> preset;
  const std::string preset_name = r.string(t, path, "preset", "");
  if (!preset_name.empty()) {
    preset = module_preset(preset_name);
    if (!preset)
      r.fail(t.get("preset"), path + "preset",
             "unknown preset '" + preset_name + "' (valid: " + join(module_preset_names()) + ")");
  }
  const std::string kind_default = preset ? to_string(preset->kind) : "";
  const std::string kind = r.string(t, path, "kind", kind_default, {"encoder", "projector", "llm"});
  if (kind.empty())
    r.fail_missing(t, path, "kind",
                   "required (encoder, projector or llm) unless a preset gives it");
  m.kind = kind == "encoder"     ? ModuleKind::kEncoder
           : kind == "projector" ? ModuleKind::kProjector
                                 : ModuleKind::kLlm;
  m.modality = r.string(t, path, "modality",
                        preset ? preset->modality : (m.kind == ModuleKind::kLlm ? "text" : ""));
  if (m.modality.empty())
    r.fail(&t, path + "modality", "required for encoders and projectors (e.g. \"vision\")");
  m.inputs = r.string_list(t, path, "inputs");
  m.token_ratio = r.number(t, path, "token_ratio", 1.0, true);
  if (m.token_ratio <= 0) r.fail(t.get("token_ratio"), path + "token_ratio", "must be > 0");
  if (m.kind == ModuleKind::kEncoder) {
    m.item_tokens = r.integer(t, path, "item_tokens", kDefaultItemTokens, 0);
  } else if (const toml::node* n = t.get("item_tokens")) {
    r.fail(n, path + "item_tokens",
           "only encoder modules take item_tokens (a projector's items follow its encoder's; "
           "the llm sees one sequence per sample)");
  }

  if (t.get("backward_over_forward"))  // a measured ratio; absent: the cost model's backward
    m.backward_over_forward = r.number(t, path, "backward_over_forward", 0, true);
  if (const toml::node* v = t.get("vocab")) {
    if (m.kind != ModuleKind::kLlm)
      r.fail(v, path + "vocab", "only llm modules have a vocabulary (embedding and LM head)");
    m.vocab = r.integer(t, path, "vocab", 0, 0);
    if (m.vocab < 1)
      r.fail(v, path + "vocab", "must be >= 1 (e.g. 51200); leave it out for no embedding");
    m.tie_embeddings = r.boolean(t, path, "tie_embeddings", true);
  } else if (const toml::node* tie = t.get("tie_embeddings")) {
    r.fail(tie, path + "tie_embeddings",
           "ties the LM head to the embedding of a vocabulary: set vocab or remove the key");
  }

  LayerSpec base = preset ? preset->layer : LayerSpec{};
  if (!preset) {
    base.kind = m.kind == ModuleKind::kProjector ? LayerKind::kMlp : LayerKind::kTransformer;
    base.causal = m.kind == ModuleKind::kLlm;
    base.gated_mlp = false;
  }
  const int count = r.integer(t, path, "layers", preset ? preset->layers : 0, 1);
  if (count == 0)
    r.fail_missing(t, path, "layers", "required (number of layers, >= 1) unless a preset gives it");
  const bool is_mlp = base.kind == LayerKind::kMlp;
  base.hidden = r.integer(t, path, "hidden", base.hidden, 1);
  base.ffn = r.integer(t, path, "ffn", base.ffn > 0 ? base.ffn : 4 * base.hidden, 1);
  if (!is_mlp) {
    base.heads =
        r.integer(t, path, "heads", base.heads > 0 ? base.heads : std::max(1, base.hidden / 64), 1);
    base.kv_heads =
        r.integer(t, path, "kv_heads", base.kv_heads > 0 ? base.kv_heads : base.heads, 1);
    if (base.hidden % base.heads != 0)
      r.fail(&t, path + "heads",
             "hidden (" + std::to_string(base.hidden) + ") must be divisible by heads");
    if (base.heads % base.kv_heads != 0)
      r.fail(&t, path + "kv_heads", "heads must be a multiple of kv_heads");
    base.out_hidden = base.hidden;
    // Read only where given, so `loom config` of a model without it stays as it was.
    if (t.get("head_dim")) base.head_dim = r.integer(t, path, "head_dim", 0, 1);
    read_latent_attention(r, t, path, base);
  } else {
    base.out_hidden = r.integer(t, path, "out_hidden", base.hidden, 1);
  }
  base.gated_mlp = r.boolean(t, path, "gated_mlp", base.gated_mlp);
  base.causal = r.boolean(t, path, "causal", base.causal);
  base.bias = r.boolean(t, path, "bias", base.bias);
  base.dtype_bytes = dtype_bytes(r, t, path);
  if (base.hidden <= 0)
    r.fail_missing(t, path, "hidden", "required (> 0) unless a preset gives it");
  base.frozen = r.boolean(t, path, "frozen", false);
  if (t.get("recompute")) base.recompute = read_recompute(r, t, path);
  // A layer costs a few hundred bytes through the model, its graph and the cost tables.
  check_memory_estimate(r.file() + ": " + path + "layers = " + std::to_string(count),
                        static_cast<double>(count) * 512, "use fewer layers");
  read_experts(r, t, path, base);
  m.layers.assign(static_cast<size_t>(count), base);
  read_attention_window(r, t, path, m.layers);
  if (base.moe()) {
    // DeepSeek-V3's first_k_dense_replace: the first layers keep a dense MLP of width ffn.
    const int dense = r.integer(t, path, "dense_layers", 0, 0);
    if (dense >= count)
      r.fail(t.get("dense_layers"), path + "dense_layers",
             std::to_string(dense) + " dense layers leave none of the module's " +
                 std::to_string(count) + " layers with experts: lower it or remove experts");
    for (int l = 0; l < dense; ++l) {
      LayerSpec& layer = m.layers[static_cast<size_t>(l)];
      layer.experts = layer.top_k = layer.expert_ffn = layer.shared_experts = 0;
      layer.capacity_factor = 0;
    }
    const std::string routing = r.string(t, path, "routing", "balanced");
    try {
      // A trace's layers include the multi-token-prediction ones after the module's own.
      const int mtp = static_cast<int>(t["mtp_layers"].value_or(std::int64_t{0}));
      m.routing = parse_routing(routing, path + "routing", base.experts, count + std::max(0, mtp),
                                std::filesystem::path(r.file()).parent_path().string());
    } catch (const InputError& e) {
      const std::string what = e.what();
      const std::string prefix = path + "routing: ";
      r.fail(t.get("routing"), path + "routing",
             what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what);
    }
    m.routing.seed = static_cast<std::uint64_t>(r.integer(t, path, "routing_seed", 1, 0));
    if (m.routing.kind == RoutingKind::kTrace) {  // resolved: `loom config` output reads anywhere
      m.routing.trace_path =
          std::filesystem::absolute(std::filesystem::path(r.file()).parent_path() /
                                    m.routing.trace_path)
              .lexically_normal()
              .string();
      r.rerecord(path + "routing", "trace:" + m.routing.trace_path);
    }
  }
  read_multi_token_prediction(r, t, path, base, m);
  for (const auto& [key, frozen] :
       {std::pair{"frozen_layers", true}, std::pair{"trainable_layers", false}}) {
    for (int l : r.int_list(t, path, key)) {
      if (l >= count)
        r.fail(t.get(key), path + key,
               "layer " + std::to_string(l) + " does not exist (module has " +
                   std::to_string(count) + ")");
      m.layers[static_cast<size_t>(l)].frozen = frozen;
    }
  }
  return m;
}

Model read_model(Reader& r, const toml::table& root) {
  const toml::table* model = r.section(root, "", "model");
  if (!model) throw InputError(r.file() + ": missing [model] section with [[model.modules]]");
  const toml::node* modules = r.find(*model, "modules");
  if (!modules || !modules->is_array_of_tables() || modules->as_array()->empty()) {
    r.fail(modules ? modules : model, "model.modules",
           "expected one or more [[model.modules]] tables");
  }
  std::vector<Module> list;
  int i = 0;
  for (const toml::node& e : *modules->as_array()) {
    r.mark(&e);
    list.push_back(read_module(r, *e.as_table(), i++));
  }
  try {
    return Model(std::move(list));
  } catch (const InputError& e) {
    throw InputError(r.file() + ": " + e.what());
  }
}

LinkSpec read_link(Reader& r, const toml::table* t, const std::string& path, LinkSpec def) {
  if (!t) return def;
  const std::string preset = r.string(*t, path, "preset", "");
  if (!preset.empty()) {
    auto link = link_preset(preset);
    if (!link)
      r.fail(t->get("preset"), path + "preset",
             "unknown link preset '" + preset + "' (valid: " + join(link_preset_names()) + ")");
    def = *link;
  }
  def.bandwidth = r.quantity(*t, path, "bandwidth", def.bandwidth, parse_bandwidth, "25GBps", true);
  def.latency = r.quantity(*t, path, "latency", def.latency, parse_seconds, "5us", false);
  return def;
}

/// Plain numbers (oversubscription ratios) in a quantity list.
std::optional<double> parse_ratio(std::string_view) {
  return std::nullopt;
}

/// [cluster.fabric] (core/cluster.hpp, docs/fabrics.md). Leaf-group defaults follow a
/// 64-port switch (NVIDIA Quantum-2 QM9700: 64 NDR ports), half its ports down: a fat-tree
/// leaf takes 32 / nics_per_node nodes, a rail-optimized group 32 nodes (one port per node
/// on each rail's leaf), as in a DGX SuperPOD scalable unit of 32 DGX H100s.
Fabric read_fabric(Reader& r, const toml::table& cluster_table, const Cluster& c) {
  const std::string path = "cluster.fabric.";
  const toml::table* t = r.section(cluster_table, "cluster.", "fabric");
  Fabric f;
  if (!t) return f;
  const std::string kind =
      r.string(*t, path, "kind", "star", {"star", "fat-tree", "rail-optimized"});
  if (kind == "star") {
    for (const char* key :
         {"nodes_per_leaf", "leaves_per_pod", "oversubscription", "tier_latency"}) {
      if (t->get(key))
        r.fail(t->get(key), path + key,
               "applies to kind = \"fat-tree\" or \"rail-optimized\"; a star has no tiers");
    }
    return f;
  }
  f.kind = kind == "fat-tree" ? FabricKind::kFatTree : FabricKind::kRailOptimized;
  constexpr int kHalfRadix = 32;
  const int def =
      f.kind == FabricKind::kFatTree ? std::max(1, kHalfRadix / c.nics_per_node) : kHalfRadix;
  // Unwritten, a leaf takes the most nodes up to the switch's that divide the cluster, so a
  // what-if over cluster.nodes (a sweep, a replay's shrinking cluster) keeps whole leaves.
  int fit = std::min(def, c.nodes);
  while (c.nodes % fit != 0) --fit;
  f.nodes_per_leaf = r.integer(*t, path, "nodes_per_leaf", fit, 1);
  if (c.nodes % f.nodes_per_leaf != 0) {
    r.fail(r.find(*t, "nodes_per_leaf"), path + "nodes_per_leaf",
           std::to_string(c.nodes) + " nodes are not whole leaves of " +
               std::to_string(f.nodes_per_leaf) +
               ": set nodes_per_leaf to a divisor of cluster.nodes, or cluster.nodes to a "
               "multiple of it");
  }
  const int leaves = c.nodes / f.nodes_per_leaf;
  f.leaves_per_pod = r.integer(*t, path, "leaves_per_pod", 0, 0);
  if (f.leaves_per_pod > 0 && leaves % f.leaves_per_pod != 0) {
    r.fail(r.find(*t, "leaves_per_pod"), path + "leaves_per_pod",
           std::to_string(leaves) + " leaves are not whole pods of " +
               std::to_string(f.leaves_per_pod) +
               ": set leaves_per_pod to a divisor of the leaves (cluster.nodes / nodes_per_leaf)");
  }
  const size_t tiers = f.leaves_per_pod > 0 ? 2 : 1;
  const std::string tier_text = tiers == 2 ? "two entries (leaf -> spine, spine -> core), as "
                                             "leaves_per_pod makes three tiers"
                                           : "one entry (leaf -> spine), as a fabric without "
                                             "leaves_per_pod has two tiers";
  f.oversubscription = r.quantity_list(*t, path, "oversubscription", parse_ratio, "[1, 7]", 1);
  if (f.oversubscription.empty()) f.oversubscription.assign(tiers, 1.0);
  if (f.oversubscription.size() != tiers) {
    r.fail(r.find(*t, "oversubscription"), path + "oversubscription",
           "has " + std::to_string(f.oversubscription.size()) + " entries; write " + tier_text);
  }
  f.tier_latency = r.quantity_list(*t, path, "tier_latency", parse_seconds, "[\"0.5us\"]", 0);
  if (!f.tier_latency.empty() && f.tier_latency.size() != tiers) {
    r.fail(r.find(*t, "tier_latency"), path + "tier_latency",
           "has " + std::to_string(f.tier_latency.size()) + " entries; write " + tier_text);
  }
  return f;
}

Cluster read_cluster(Reader& r, const toml::table& root) {
  static const toml::table kEmpty;
  const toml::table* found = r.section(root, "", "cluster");
  const toml::table& t = found ? *found : kEmpty;
  Cluster c;
  c.nodes = r.integer(t, "cluster.", "nodes", 1, 1);
  c.gpus_per_node = r.integer(t, "cluster.", "gpus_per_node", 4, 1);
  constexpr std::int64_t kMaxGpus = std::int64_t{1} << 24;  // GPU indices are ints
  if (std::int64_t{c.nodes} * c.gpus_per_node > kMaxGpus) {
    r.fail(r.find(t, "nodes"), "cluster.nodes",
           std::to_string(c.nodes) + " nodes x " + std::to_string(c.gpus_per_node) +
               " GPUs is more than Loom models (" + std::to_string(kMaxGpus) + " GPUs)");
  }
  const std::string gpu = r.string(t, "cluster.", "gpu", "A100-80GB");
  try {
    c.gpu = gpu_preset(gpu);
  } catch (const InputError& e) {
    r.fail(t.get("gpu"), "cluster.gpu", e.what());
  }
  c.gpu.peak_flops =
      r.quantity(t, "cluster.", "peak_flops", c.gpu.peak_flops, parse_flops, "312TFLOPS", true);
  c.gpu.memory_bytes =
      r.quantity(t, "cluster.", "gpu_memory", c.gpu.memory_bytes, parse_bytes, "80GB", true);
  c.intra_node = read_link(r, r.section(t, "cluster.", "intra_node"), "cluster.intra_node.",
                           *link_preset("nvlink3"));
  c.inter_node = read_link(r, r.section(t, "cluster.", "inter_node"), "cluster.inter_node.",
                           *link_preset("ib-hdr"));
  // DGX/HGX boxes of SXM parts have one NIC per GPU; PCIe servers one per node.
  c.nics_per_node =
      r.integer(t, "cluster.", "nics_per_node", c.gpu.nic_per_gpu ? c.gpus_per_node : 1, 1);
  c.fabric = read_fabric(r, t, c);
  return c;
}

CostConfig read_cost(Reader& r, const toml::table& root, const Model& model) {
  static const toml::table kEmpty;
  const toml::table* found = r.section(root, "", "cost");
  const toml::table& t = found ? *found : kEmpty;
  CostConfig c;
  c.model = r.string(t, "cost.", "model", c.model, {"analytical", "table", "calibrated"});
  if (t.get("efficiency")) {
    c.efficiency = r.number(t, "cost.", "efficiency", c.efficiency);
    // 0 names the kernel-level model explicitly, so `--set cost.efficiency=0` can switch a
    // config that sets a fraction back to it.
    if (!(c.efficiency >= 0 && c.efficiency <= 1))
      r.fail(t.get("efficiency"), "cost.efficiency",
             "must be in [0, 1]: a fraction of the peak, or 0 (or left out) for the "
             "kernel-level model");
  }
  c.profile = relative_to_config(r.file(), r.string(t, "cost.", "profile", ""));
  if (const toml::node* old = t.get("activation_checkpointing"))
    r.fail(old, "cost.activation_checkpointing",
           "renamed: use cost.recompute = \"full\" (or \"selective\", \"none\")");
  c.recompute = read_recompute(r, t, "cost.");
  // Selective recompute, globally or for one module, needs the kernel-level model.
  const bool kernel_level = c.model == "analytical" && c.efficiency <= 0;
  if (c.recompute == Recompute::kSelective && !kernel_level)
    r.fail(t.get("recompute"), "cost.recompute", kSelectiveNeedsKernelLevel);
  for (const auto& [name, recompute] : module_recompute(model)) {
    if (recompute == to_string(Recompute::kSelective) && !kernel_level)
      r.fail(module_key(root, name, "recompute"), "model.modules." + name + ".recompute",
             kSelectiveNeedsKernelLevel);
  }
  c.recompute_modules = read_recompute_modules(r, t);
  const std::string attention =
      r.string(t, "cost.", "attention", "flash", {"flash", "flash2", "unfused"});
  c.flash_attention = attention != "unfused";
  c.flash2 = attention == "flash2";
  const std::string fp8 = r.string(t, "cost.", "fp8", "off", {"off", "delayed", "current", "mx"});
  c.fp8 = fp8 == "delayed"   ? Fp8Recipe::kDelayed
          : fp8 == "current" ? Fp8Recipe::kCurrent
          : fp8 == "mx"      ? Fp8Recipe::kMx
                             : Fp8Recipe::kOff;
  if (c.fp8 != Fp8Recipe::kOff && !kernel_level)
    r.fail(t.get("fp8"), "cost.fp8",
           "prices the FP8 GEMMs and casts in the kernel-level model: use cost.model = "
           "\"analytical\" without cost.efficiency, or cost.fp8 = \"off\"");
  // FP8 primary weights (Megatron's fp8_param_gather): Megatron-Bridge's FP8 recipes set it
  // for current, delayed and MX scaling (src/megatron/bridge/training/mixed_precision.py,
  // bf16_with_fp8_current_scaling_mixed and siblings). Read only under FP8.
  // Megatron-Bridge's current-scaling recipe keeps the first and last transformer layer in
  // BF16 (bf16_with_fp8_current_scaling_mixed: num_layers_at_start/end_in_bf16 = 1); its
  // delayed and MX recipes keep none.
  if (c.fp8 != Fp8Recipe::kOff) {
    c.memory.fp8_primary_weights = r.boolean(t, "cost.", "fp8_params", true);
    c.fp8_bf16_layers =
        r.integer(t, "cost.", "fp8_bf16_layers", c.fp8 == Fp8Recipe::kCurrent ? 1 : 0, 0);
  } else {
    for (const char* key : {"fp8_params", "fp8_bf16_layers"}) {
      if (t.get(key))
        r.fail(t.get(key), std::string("cost.") + key,
               "applies to FP8 training only: set cost.fp8 or remove the key");
    }
  }
  c.tp_comm_overlap = r.boolean(t, "cost.", "tp_comm_overlap", false);
  if (c.tp_comm_overlap) {
    const std::string how = r.string(t, "cost.", "tp_overlap", "ring-exchange",
                                     {"ring-exchange", "ring-exchange-aggregate", "ideal"});
    c.tp_overlap = how == "ideal"           ? TpOverlap::kIdeal
                   : how == "ring-exchange" ? TpOverlap::kRingExchange
                                            : TpOverlap::kRingExchangeAggregate;
  } else if (t.get("tp_overlap")) {
    r.fail(t.get("tp_overlap"), "cost.tp_overlap",
           "says how TP communication overlaps the GEMMs: set cost.tp_comm_overlap = true or "
           "remove the key");
  }
  c.gradient_accumulation_fusion = r.boolean(t, "cost.", "gradient_accumulation_fusion", false);
  c.jitter = r.number(t, "cost.", "jitter", 0);
  if (!(c.jitter >= 0 && c.jitter <= 0.3))
    r.fail(t.get("jitter"), "cost.jitter",
           "is the relative standard deviation of a kernel's time: use 0 (off) to 0.3, e.g. "
           "0.01");
  c.jitter_seed = r.integer(t, "cost.", "jitter_seed", 1, 0);
  c.memory.gradient_bytes_per_param = r.number(t, "cost.", "gradient_bytes_per_param", 4);
  c.memory.optimizer_bytes_per_param = r.number(t, "cost.", "optimizer_bytes_per_param", 12);
  if (c.model == "calibrated" && c.profile.empty())
    r.fail(found, "cost.profile",
           "required by the calibrated cost model (a CSV layer,phase,tokens,tp,seconds)");
  if (const toml::table* table = r.section(t, "cost.", "table")) {
    for (const Module& m : model.modules()) {
      const std::string path = "cost.table." + m.name + ".";
      const toml::table* e = r.section(*table, "cost.table.", m.name);
      if (!e) continue;
      TableEntry entry;
      entry.forward_s = r.quantity(*e, path, "forward", 0, parse_seconds, "0.5ms", false);
      const double backward =
          r.quantity(*e, path, "backward", 2 * entry.forward_s, parse_seconds, "1.0ms", false);
      entry.input_grad_s =
          r.quantity(*e, path, "input_grad", backward / 2, parse_seconds, "0.5ms", false);
      entry.weight_grad_s = r.quantity(*e, path, "weight_grad", backward - entry.input_grad_s,
                                       parse_seconds, "0.5ms", false);
      entry.activation_bytes =
          r.quantity(*e, path, "activation_bytes", 0, parse_bytes, "64MiB", false);
      entry.output_bytes = r.quantity(*e, path, "output_bytes", 0, parse_bytes, "8MiB", false);
      entry.parameters = r.number(*e, path, "parameters", 0);
      c.table[m.name] = entry;
    }
  }
  if (c.model == "table" && c.table.size() != model.modules().size()) {
    for (const Module& m : model.modules()) {
      if (!c.table.count(m.name))
        r.fail(found, "cost.table." + m.name,
               "missing: the table cost model needs forward/backward times for every module");
    }
  }
  return c;
}

/// Why context parallelism cannot split `layer`'s attention yet; nullptr: it can.
const char* cp_unsupported(const LayerSpec& layer) {
  if (layer.mla())
    return "the K/V exchange of multi-head latent attention (kv_lora_rank) is not modelled yet";
  if (layer.sliding_window > 0)
    return "a sliding window's K/V exchange (sliding_window) is not modelled yet";
  return nullptr;
}

/// `[parallel.modules.<name>]` tables (core/layout.hpp), resolved and checked.
void read_module_layouts(Reader& r, const toml::table& parallel, Config& c) {
  const toml::table* mods = r.section(parallel, "parallel.", "modules");
  if (!mods) return;
  std::map<std::string, ModuleLayout> layouts;
  for (const auto& [name_key, node] : *mods) {
    const std::string name(name_key.str());
    const std::string path = "parallel.modules." + name + ".";
    const toml::table* t = r.section(*mods, "parallel.modules.", name);
    if (!t) r.fail(&node, path, "expected a table");
    ModuleLayout l;
    l.tp = r.integer(*t, path, "tp", 1, 1);
    l.cp = r.integer(*t, path, "cp", 1, 1);
    l.cp_replicates = r.string(*t, path, "cp_mode", "split", {"split", "replicate"}) == "replicate";
    l.pp = r.integer(*t, path, "pp", 1, 1);
    l.dp = r.integer(*t, path, "dp", 1, 1);
    if (l.cp > 1 && !l.cp_replicates) {
      for (const Module& m : c.model.modules()) {
        if (m.name != name) continue;
        for (const LayerSpec& layer : m.layers) {
          if (const char* why = cp_unsupported(layer))
            r.fail(t->get("cp"), path + "cp", std::string(why) + ": set cp = 1");
        }
      }
    }
    // `gpus = 5` (one GPU, e.g. from --set) reads as the range "5".
    const toml::node* g = t->get("gpus");
    const bool one_gpu = g && g->is_integer() && *g->value<std::int64_t>() >= 0;
    const std::string gpus =
        one_gpu ? std::to_string(*g->value<std::int64_t>()) : r.string(*t, path, "gpus", "");
    if (one_gpu) r.mark(g, path + "gpus");
    if (!gpus.empty()) {
      int end = 0;
      if (!parse_gpu_range(gpus, &l.first_gpu, &end))
        r.fail(t->get("gpus"), path + "gpus",
               "expected a GPU range \"first-last\" (e.g. \"4-7\") or one GPU \"5\", got \"" +
                   gpus + "\"");
      l.gpus = end - l.first_gpu;
    }
    layouts[name] = l;
  }
  try {
    c.parallel.module_layouts = resolve_module_layouts(c.model, layouts, c.cluster);
  } catch (const InputError& e) {
    throw InputError(r.file() + ": " + e.what());
  } catch (const InfeasibleError& e) {
    throw InfeasibleError(r.file() + ": " + e.what());
  }
}

/// schedule.global_batch (read only where given, so configs without it resolve as before):
/// the microbatches per replica that make it, or exit 2 naming the nearest batches that
/// split evenly. `--set schedule.global_batch=N` overrides the file's microbatches.
void read_global_batch(Reader& r, const toml::table& s, Config& c) {
  if (!s.get("global_batch")) return;
  ScheduleConfig& sc = c.schedule;
  sc.global_batch = r.integer(s, "schedule.", "global_batch", 0, 1);
  const PerModule<ModuleLayout>& layouts = c.parallel.module_layouts;
  const int dp = layouts.empty() ? c.parallel.dp : layouts[ModuleId{isize(layouts) - 1}].dp;
  const int step = dp * sc.microbatch_size;  // samples per microbatch over all replicas
  if (sc.global_batch % step != 0) {
    const int below = std::max(step, sc.global_batch / step * step);
    r.fail(s.get("global_batch"), "schedule.global_batch",
           std::to_string(sc.global_batch) + " samples do not split into microbatches of " +
               std::to_string(sc.microbatch_size) + " over " + std::to_string(dp) +
               " data-parallel replicas (" + std::to_string(step) + " samples a step); use " +
               std::to_string(below) + " or " + std::to_string(below + step) +
               ", or change schedule.microbatch_size");
  }
  const int derived = sc.global_batch / step;
  // A --set of one overrides the file's other; both in the file, or both set, must agree.
  auto from_set = [](const toml::node* n) { return n->source().begin.line == 0; };
  const toml::node* microbatches = s.get("microbatches");
  const bool overridden =
      microbatches && from_set(s.get("global_batch")) && !from_set(microbatches);
  if (microbatches && !overridden && sc.microbatches != derived)
    r.fail(s.get("microbatches"), "schedule.microbatches",
           std::to_string(sc.microbatches) +
               " disagrees with schedule.global_batch = " + std::to_string(sc.global_batch) + " (" +
               std::to_string(derived) + " microbatches of " + std::to_string(sc.microbatch_size) +
               " per replica); give one "
               "of the two");
  sc.microbatches = derived;
  r.rerecord("schedule.microbatches", derived);
}

/// The table `key`'s value goes in, as path components: "cost.table.<module>" and
/// "parallel.modules.<module>" keep the module name whole (it may hold dots).
std::vector<std::string> table_path(const std::string& key) {
  std::vector<std::string> parts;
  for (const std::string prefix : {"cost.table.", "parallel.modules."}) {
    if (key.starts_with(prefix) && key.size() > prefix.size()) {
      std::stringstream ss(prefix);
      for (std::string p; std::getline(ss, p, '.');) parts.push_back(p);
      parts.push_back(key.substr(prefix.size()));
      return parts;
    }
  }
  std::stringstream ss(key);
  for (std::string p; std::getline(ss, p, '.');) parts.push_back(p);
  return parts;
}

toml::table& subtable(toml::table& root, const std::vector<std::string>& path) {
  toml::table* t = &root;
  for (const std::string& p : path) {
    if (!t->get(p) || !t->get(p)->is_table()) t->insert_or_assign(p, toml::table{});
    t = t->get(p)->as_table();
  }
  return *t;
}

/// `loom config`'s output: every key the reader resolved (defaults included) as a TOML
/// document that load_config reads back to the same Config. Files named in the config
/// become absolute paths, so the document can be saved anywhere.
std::string resolved_document(const Reader& r, const Config& c) {
  toml::table root;
  toml::array modules;
  const std::vector<std::string>& keys = r.resolved_keys();
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string& key = keys[i];
    const toml::node& value = *r.resolved_values().get(i);
    const size_t dot = key.rfind('.');
    const std::string leaf = key.substr(dot + 1);
    if (key.starts_with("model.modules.")) {
      // read_module records "model.modules.<index>.name" first, then the module's keys.
      if (leaf == "name") modules.push_back(toml::table{});
      modules.back().as_table()->insert_or_assign(leaf, value);
      continue;
    }
    subtable(root, table_path(key.substr(0, dot))).insert_or_assign(leaf, value);
  }
  subtable(root, {"model"}).insert_or_assign("modules", std::move(modules));
  const auto absolute = [&](const std::vector<std::string>& table, const std::string& leaf,
                            const std::string& file) {
    if (!file.empty())
      subtable(root, table)
          .insert_or_assign(leaf, std::filesystem::absolute(file).lexically_normal().string());
  };
  absolute({"workload"}, "csv", c.workload.csv);
  absolute({"cost"}, "profile", c.cost.profile);
  for (const auto& [leaf, file] : config::replay_files(c.replay)) absolute({"replay"}, leaf, file);
  if (c.workload.csv.empty() && c.workload.dataset.empty()) {
    toml::table& tokens = subtable(root, {"workload", "tokens"});
    for (const auto& [modality, count] : c.workload.tokens)
      tokens.insert_or_assign(modality, std::int64_t{count});
  }
  std::ostringstream os;
  os << "# resolved configuration of " << c.path
     << " (file, --set and defaults); loom sim reads it back\n"
     << toml::toml_formatter{root,
                             toml::toml_formatter::default_flags & ~toml::format_flags::indentation}
     << "\n";
  return os.str();
}

/// A scheduler option's value as written; the scheduler that declares it checks its type.
OptionValue option_value(const Reader& r, const toml::node& n, const std::string& key) {
  OptionValue v{.value = false, .origin = r.where(&n)};
  if (n.is_boolean()) {
    v.value = *n.value<bool>();
  } else if (n.is_integer()) {
    v.value = *n.value<std::int64_t>();
  } else if (n.is_floating_point()) {
    v.value = *n.value<double>();
  } else if (n.is_string()) {
    v.value = *n.value<std::string>();
  } else if (n.is_array() &&
             (n.as_array()->empty() || n.as_array()->is_homogeneous(toml::node_type::integer))) {
    std::vector<std::int64_t> list;
    for (const toml::node& e : *n.as_array()) list.push_back(*e.value<std::int64_t>());
    v.value = std::move(list);
  } else {
    r.fail(&n, key, "expected a number, a string, true/false or an array of integers");
  }
  return v;
}

/// `[schedule.<scheduler>]` tables and, as earlier releases wrote them, scheduler options
/// flat under `[schedule]`: kept as written. Which scheduler declares which key, and of
/// what type, is the schedulers' knowledge (schedulers/scheduler_options.hpp checks them
/// when the study is loaded); core only keeps them apart from the shared keys.
void read_scheduler_options(Reader& r, const toml::table& s, ScheduleConfig& schedule) {
  for (const auto& [raw_key, node] : s) {
    const std::string key(raw_key.str());
    if (r.was_read(node)) continue;
    if (const toml::table* table = node.as_table()) {
      OptionTable& options = schedule.options[key];
      for (const auto& [option, value] : *table) {
        const std::string full = "schedule." + key + "." + std::string(option.str());
        options[std::string(option.str())] = option_value(r, value, full);
        r.mark(&value, full);
      }
      r.mark(&node);
    } else {
      schedule.flat_options[key] = option_value(r, node, "schedule." + key);
      r.mark(&node, "schedule." + key);
    }
  }
}

}  // namespace

/// parallel.cp and parallel.cp_comm (read, and so shown by `loom config`, only with cp > 1).
/// Megatron's zigzag split cuts each sequence into 2 x cp equal chunks
/// (megatron/core/utils.py, get_batch_on_this_cp_rank): a synthetic text-only workload
/// whose length does not divide is refused here; real samples are padded (lowering).
void read_context_parallel(Reader& r, const toml::table& p, Config& c) {
  c.parallel.cp = r.integer(p, "parallel.", "cp", 1, 1);
  if (c.parallel.cp == 1) {
    if (p.get("cp_comm"))
      r.fail(p.get("cp_comm"), "parallel.cp_comm",
             "applies to context parallelism only: set parallel.cp > 1 or remove the key");
    return;
  }
  for (int l = 0; l < c.model.num_layers(); ++l) {
    if (const char* why = cp_unsupported(c.model.layer(l)))
      r.fail(p.get("cp"), "parallel.cp", std::string(why) + ": set parallel.cp = 1");
  }
  const std::string comm = r.string(p, "parallel.", "cp_comm", "p2p", {"p2p", "all-gather", "a2a"});
  c.parallel.cp_comm = comm == "p2p"          ? CpComm::kP2p
                       : comm == "all-gather" ? CpComm::kAllGather
                                              : CpComm::kA2a;
  if (c.parallel.cp_comm != CpComm::kA2a) return;
  // Ulysses gives each CP rank heads / cp of every TP group's heads (query and K/V).
  const int split = c.parallel.tp * c.parallel.cp;
  for (int l = 0; l < c.model.num_layers(); ++l) {
    const LayerSpec& layer = c.model.layer(l);
    if (layer.kind != LayerKind::kTransformer) continue;
    if (layer.heads % split != 0 || layer.kv_heads % split != 0)
      r.fail(
          p.get("cp_comm"), "parallel.cp_comm",
          "\"a2a\" (Ulysses) splits the attention heads over tp x cp = " + std::to_string(split) +
              " GPUs, but module '" + c.model.module(c.model.module_of(l)).name + "' has " +
              std::to_string(layer.heads) + " heads and " + std::to_string(layer.kv_heads) +
              " K/V heads: use cp_comm = \"p2p\" or a cp that divides them");
  }
}

/// parallel.order (read, and so shown by `loom config`, only where given): Megatron-Core's
/// order string (parallel_state.py, RankGenerator), innermost dimension first.
void read_placement_order(Reader& r, const toml::table& p, Config& c) {
  const toml::node* at = p.get("order");
  if (!at) return;
  const std::string text = r.string(p, "parallel.", "order", "");
  const std::string fix =
      ": write tp first, then cp, dp and pp in any order, ep (optional) right before dp, "
      "e.g. \"tp-cp-ep-dp-pp\" (Megatron's) or \"tp-cp-pp-dp\" (Loom's default)";
  std::vector<std::string> names;
  for (size_t from = 0;;) {
    const size_t dash = text.find('-', from);
    names.push_back(text.substr(from, dash == std::string::npos ? dash : dash - from));
    if (dash == std::string::npos) break;
    from = dash + 1;
  }
  if (!names.empty() && names.front() != "tp")
    r.fail(at, "parallel.order",
           "'" + text +
               "' does not start with tp (a Loom rank is one tensor-parallel group of "
               "consecutive GPUs)" +
               fix);
  std::vector<PlacementDim> dims;
  for (size_t i = 1; i < names.size(); ++i) {
    const std::string& n = names[i];
    if (n == "ep") {
      if (i + 1 >= names.size() || names[i + 1] != "dp")
        r.fail(at, "parallel.order",
               "'" + text +
                   "': ep must come right before dp (expert-parallel groups are "
                   "consecutive data-parallel ranks)" +
                   fix);
      continue;
    }
    if (n != "cp" && n != "dp" && n != "pp")
      r.fail(at, "parallel.order", "'" + text + "': unknown dimension '" + n + "'" + fix);
    const PlacementDim d = n == "cp"   ? PlacementDim::kCp
                           : n == "dp" ? PlacementDim::kDp
                                       : PlacementDim::kPp;
    if (std::find(dims.begin(), dims.end(), d) != dims.end())
      r.fail(at, "parallel.order", "'" + text + "' names '" + n + "' twice" + fix);
    dims.push_back(d);
  }
  if (dims.size() != 3) r.fail(at, "parallel.order", "'" + text + "' leaves out a dimension" + fix);
  std::copy(dims.begin(), dims.end(), c.parallel.order.begin());
}

/// parallel.ep (read, and so shown by `loom config`, only where the model has experts).
void read_expert_parallel(Reader& r, const toml::table& p, Config& c) {
  const LayerSpec* moe = nullptr;
  for (int l = 0; l < c.model.num_layers() && !moe; ++l) {
    if (c.model.layer(l).moe()) moe = &c.model.layer(l);
  }
  if (!moe) {
    for (const char* key : {"ep", "etp"}) {
      if (p.get(key))
        r.fail(p.get(key), std::string("parallel.") + key,
               "shards experts, and the model has none: give a module experts or remove the key");
    }
    return;
  }
  // Expert tensor parallelism (Megatron-Core's expert_tensor_parallel_size, which defaults
  // to the tensor-parallel size): each expert's GEMMs split over the rank's TP group like
  // the dense MLP's. Read only where given, so `loom config` stays as it was.
  if (const toml::node* at = p.get("etp")) {
    const int etp = r.integer(p, "parallel.", "etp", c.parallel.tp, 1);
    if (etp != c.parallel.tp)
      r.fail(at, "parallel.etp",
             std::to_string(etp) + " differs from parallel.tp = " + std::to_string(c.parallel.tp) +
                 ": Loom models experts split like the dense layers (Megatron-Core's default), "
                 "not MoE parallel folding; set etp = " +
                 std::to_string(c.parallel.tp) + " or remove the key");
  }
  c.parallel.ep = r.integer(p, "parallel.", "ep", 1, 1);
  const int ep = c.parallel.ep;
  if (ep == 1) return;
  const toml::node* at = p.get("ep");
  if ((c.parallel.dp * c.parallel.cp) % ep != 0)
    r.fail(at, "parallel.ep",
           std::to_string(ep) +
               " does not divide dp x cp = " + std::to_string(c.parallel.dp * c.parallel.cp) +
               " (expert-parallel groups are carved out of the data-parallel ranks, as "
               "Megatron-Core does): change parallel.ep or parallel.dp");
  for (int l = 0; l < c.model.num_layers(); ++l) {
    const LayerSpec& layer = c.model.layer(l);
    if (layer.moe() && layer.experts % ep != 0)
      r.fail(at, "parallel.ep",
             std::to_string(ep) + " does not divide the " + std::to_string(layer.experts) +
                 " experts of module '" + c.model.module(c.model.module_of(l)).name +
                 "': pick a divisor");
  }
}

/// The synthetic text-only sequence must split into 2 x parallel.cp chunks.
void check_context_parallel_tokens(Reader& r, const toml::table& root, const Config& c) {
  if (c.parallel.cp == 1 || !c.workload.csv.empty() || !c.workload.dataset.empty() ||
      c.model.modules().size() != 1)
    return;
  int tokens = 0;
  for (const auto& [modality, n] : c.workload.tokens) tokens += n;
  const int chunks = 2 * c.parallel.cp;
  if (tokens % chunks == 0) return;
  const toml::table* par = r.section(root, "", "parallel");
  r.fail(par ? par->get("cp") : nullptr, "parallel.cp",
         std::to_string(c.parallel.cp) + " splits each sequence into 2 x cp = " +
             std::to_string(chunks) + " chunks (Megatron's causal balance), but the workload's " +
             std::to_string(tokens) + " tokens per sample do not divide by " +
             std::to_string(chunks) + ": change workload.tokens or parallel.cp");
}

Config load_config(const ConfigSource& source, const std::vector<std::string>& overrides) {
  const std::string& path = source.path;
  toml::table root = parse_source(source);
  for (const std::string& o : overrides) apply_override(root, path, o);
  Reader r(path);
  static const toml::table kEmpty;
  Config c;
  c.path = path;
  c.model = read_model(r, root);
  c.cluster = read_cluster(r, root);
  c.cost = read_cost(r, root, c.model);
  if (c.cost.flash2) {  // FlashAttention-2's speed on this GPU instead of its fused kernel's
    GpuSpec& gpu = c.cluster.gpu;
    if (gpu.flash2_forward_fraction <= 0) {
      const toml::table* cost = r.section(root, "", "cost");
      r.fail(cost ? cost->get("attention") : nullptr, "cost.attention",
             "no FlashAttention-2 figure for cluster.gpu '" + gpu.name +
                 "'; use \"flash\" (the fused attention Transformer Engine runs there)");
    }
    gpu.flash_forward_fraction = gpu.flash2_forward_fraction;
    gpu.flash_backward_fraction = gpu.flash2_backward_fraction;
  }
  if (c.cost.fp8 != Fp8Recipe::kOff) {
    try {
      c.cluster.gpu.peak_for_dtype(1);  // names the GPU and the fix when it has no FP8
    } catch (const InputError& e) {
      const toml::table* cost = r.section(root, "", "cost");
      const std::string what = e.what();
      r.fail(cost ? cost->get("fp8") : nullptr, "cost.fp8", what.substr(what.find(": ") + 2));
    }
  }

  const toml::table* par = r.section(root, "", "parallel");
  const toml::table& p = par ? *par : kEmpty;
  c.parallel.pp = r.integer(p, "parallel.", "pp", 1, 1);
  c.parallel.dp = r.integer(p, "parallel.", "dp", 1, 1);
  c.parallel.tp = r.integer(p, "parallel.", "tp", 1, 1);
  read_context_parallel(r, p, c);
  read_expert_parallel(r, p, c);
  read_placement_order(r, p, c);
  c.cost.memory.expert_parallel = c.parallel.ep;
  c.parallel.sequence_parallel = r.boolean(p, "parallel.", "sequence_parallel", false);
  // Megatron-Core's TransformerConfig refuses expert parallelism with tensor parallelism
  // and no sequence parallelism: each TP rank dispatches its own share of the tokens.
  if (c.parallel.ep > 1 && c.parallel.tp > 1 && !c.parallel.sequence_parallel)
    r.fail(p.get("tp"), "parallel.tp",
           "with parallel.ep > 1 needs sequence parallelism (each TP rank dispatches its own "
           "share of the tokens, as Megatron-Core requires): set parallel.sequence_parallel = "
           "true");
  c.cost.memory.distributed_optimizer = r.boolean(p, "parallel.", "distributed_optimizer", false);
  c.parallel.overlap_grad_reduce = r.boolean(p, "parallel.", "overlap_grad_reduce", false);
  c.parallel.grad_bucket_size = r.number(p, "parallel.", "grad_bucket_size", 0);
  c.parallel.fsdp = r.boolean(p, "parallel.", "fsdp", false);
  c.cost.memory.shard_parameters = c.parallel.fsdp;
  // Transformer Engine keeps an FP8 weight and its transpose (FP8 primer; Float8Tensor's
  // cached transpose) for the step.
  c.cost.memory.fp8_weight_bytes_per_param = c.cost.fp8 != Fp8Recipe::kOff ? 2 : 0;
  // torchtitan's default policy (models/llama3/infra/parallelize.py, apply_fsdp:
  // reshard_after_forward = not pp_enabled): with pipelining a stage's parameters stay
  // gathered across its microbatches, and PyTorch pipelining reshards and reduce-scatters
  // after the stage's last backward (stage.py, backward_maybe_with_nosync).
  // Read (and so shown by `loom config`) only under FSDP.
  if (c.parallel.fsdp) {
    c.parallel.fsdp_reshard_after_forward =
        r.boolean(p, "parallel.", "fsdp_reshard_after_forward", c.parallel.pp == 1);
  } else if (p.get("fsdp_reshard_after_forward")) {
    r.fail(p.get("fsdp_reshard_after_forward"), "parallel.fsdp_reshard_after_forward",
           "applies to FSDP only: set parallel.fsdp = true or remove the key");
  }
  if (c.parallel.fsdp && c.parallel.dp == 1)
    r.fail(p.get("fsdp"), "parallel.fsdp",
           "shards over the data-parallel replicas: set parallel.dp > 1 or turn it off");
  if (c.parallel.fsdp && c.parallel.overlap_grad_reduce)
    r.fail(p.get("overlap_grad_reduce"), "parallel.overlap_grad_reduce",
           "FSDP reduce-scatters each layer's gradients behind the backward itself; remove "
           "the key or parallel.fsdp");
  read_module_layouts(r, p, c);
  // Sequence parallelism shards what tensor parallelism replicates: it applies to every
  // layer whose module runs TP > 1 (a per-module layout's own tp, else parallel.tp).
  if (c.parallel.sequence_parallel && max_tensor_parallel(c.parallel) == 1)
    r.fail(p.get("sequence_parallel"), "parallel.sequence_parallel",
           c.parallel.module_layouts.empty()
               ? "needs tensor parallelism: set parallel.tp > 1 or turn it off"
               : "needs tensor parallelism: set a module's parallel.modules.<name>.tp > 1 or "
                 "turn it off");
  if (c.parallel.cp > 1 && !c.parallel.module_layouts.empty())
    r.fail(p.get("cp"), "parallel.cp",
           "is the single layout's; per-module layouts (parallel.modules) set each module's "
           "own cp: move it into the modules' tables");
  if (c.parallel.ep > 1 && !c.parallel.module_layouts.empty())
    r.fail(p.get("ep"), "parallel.ep",
           "is the single layout's; per-module layouts (parallel.modules) do not shard "
           "experts: remove one of the two");
  if (c.parallel.fsdp && !c.parallel.module_layouts.empty())
    r.fail(p.get("fsdp"), "parallel.fsdp",
           "shards one layout's replicas; per-module layouts (parallel.modules) shard by "
           "their own data parallelism: remove one of the two");

  const toml::table* sch = r.section(root, "", "schedule");
  const toml::table& s = sch ? *sch : kEmpty;
  c.schedule.name = r.string(s, "schedule.", "name", c.schedule.name);
  c.schedule.microbatches = r.integer(s, "schedule.", "microbatches", c.schedule.microbatches, 1);
  c.schedule.microbatch_size =
      r.integer(s, "schedule.", "microbatch_size", c.schedule.microbatch_size, 1);
  c.schedule.partition_view =
      r.string(s, "schedule.", "partition_view", "true", {"true", "naive"}) == "true"
          ? PartitionView::kTrue
          : PartitionView::kNaive;
  c.schedule.stage_layers = r.int_list(s, "schedule.", "stage_layers");
  c.schedule.layout = r.string(s, "schedule.", "layout", "");
  if (!c.schedule.layout.empty()) {
    if (!c.schedule.stage_layers.empty())
      r.fail(s.get("layout"), "schedule.layout",
             "and schedule.stage_layers both split the layers: keep one of them");
    if (c.model.modules().size() != 1)
      r.fail(s.get("layout"), "schedule.layout",
             "splits one language model's layers (Megatron's pipeline layout); this model has " +
                 std::to_string(c.model.modules().size()) + " modules: use schedule.stage_layers");
    try {
      const std::vector<LayoutStage> stages = parse_pipeline_layout(c.schedule.layout);
      c.schedule.stage_layers =
          layout_stage_layers(stages, c.model.num_layers(), c.model.modules().front().mtp_layers);
      // `loom config` shows the layout resolved: every stage written out.
      c.schedule.layout = format_pipeline_layout(stages);
      r.rerecord("schedule.layout", c.schedule.layout);
    } catch (const InputError& e) {
      const std::string what = e.what();
      r.fail(s.get("layout"), "schedule.layout", what.substr(what.find(": ") + 2));
    }
  }
  read_global_batch(r, s, c);
  read_scheduler_options(r, s, c.schedule);

  const toml::table* wl = r.section(root, "", "workload");
  const toml::table& w = wl ? *wl : kEmpty;
  if (const toml::table* tokens = r.section(w, "workload.", "tokens")) {
    c.workload.tokens.clear();
    for (const auto& [key, node] : *tokens) {
      c.workload.tokens[std::string(key.str())] =
          r.integer(*tokens, "workload.tokens.", std::string(key.str()), 0, 0);
    }
  }
  c.workload.csv = relative_to_config(path, r.string(w, "workload.", "csv", ""));
  c.workload.dataset = r.string(w, "workload.", "dataset", "");
  if (!c.workload.dataset.empty()) {
    try {
      find_dataset(c.workload.dataset);
    } catch (const InputError& e) {
      r.fail(w.get("dataset"), "workload.dataset", e.what());
    }
    if (!c.workload.csv.empty())
      r.fail(w.get("dataset"), "workload.dataset", "give either workload.dataset or workload.csv");
  }
  c.workload.seed = r.integer(w, "workload.", "seed", c.workload.seed, 0);
  c.workload.offset = r.integer(w, "workload.", "offset", c.workload.offset, 0);
  c.workload.images_per_sample = r.probability_list(w, "workload.", "images_per_sample");
  if (w.get("images_per_sample")) {
    double sum = 0;
    for (const double prob : c.workload.images_per_sample) sum += prob;
    if (c.workload.dataset.empty())
      r.fail(w.get("images_per_sample"), "workload.images_per_sample",
             "applies to the generators (workload.dataset); a CSV lists each sample's images");
    if (std::abs(sum - 1) > 1e-6)
      r.fail(w.get("images_per_sample"), "workload.images_per_sample",
             "the probabilities of 0, 1, 2, ... images a sample sum to " + std::to_string(sum) +
                 ", not 1 (e.g. [0, 0.5, 0.3, 0.2])");
  }
  if (const std::string rule = r.string(w, "workload.", "image_tokens", "native");
      rule != "native") {
    try {
      c.workload.image_tokens = parse_image_token_rule(rule);
    } catch (const InputError& e) {
      r.fail(w.get("image_tokens"), "workload.image_tokens", e.what());
    }
    if (c.workload.csv.empty() && c.workload.dataset.empty())
      r.fail(w.get("image_tokens"), "workload.image_tokens",
             "applies to images given by size (workload.dataset, or a workload.csv with "
             "<modality>_resolution columns); workload.tokens gives tokens directly");
  }
  if (const std::string packing = r.string(w, "workload.", "packing", "none"); packing != "none") {
    try {
      c.workload.pack_tokens = parse_packing(packing);
    } catch (const InputError& e) {
      r.fail(w.get("packing"), "workload.packing", e.what());
    }
  }
  check_context_parallel_tokens(r, root, c);

  const toml::table* sim = r.section(root, "", "sim");
  const toml::table& sm = sim ? *sim : kEmpty;
  // Which backends exist is app/backends.cpp's knowledge: load_study_config checks the name.
  c.sim.backend = r.string(sm, "sim.", "backend", c.sim.backend);
  c.sim.network_model =
      r.string(sm, "sim.", "network_model", c.sim.network_model, {"CM02", "LV08"});
  c.sim.fold = r.boolean(sm, "sim.", "fold", c.sim.fold);
  c.replay = config::read_replay(r, root);
  if (const toml::table* v = r.section(root, "", "validation")) {
    c.validation.measured_iteration_s =
        r.quantity(*v, "validation.", "measured_iteration", 0, parse_seconds, "3.528s", true);
    c.validation.source = r.string(*v, "validation.", "source", "");
    if (c.validation.source.empty())
      r.fail(v, "validation.source", "name the paper, table and row of the measured run");
  }

  r.check_unknown(root, "");
  c.resolved_toml = resolved_document(r, c);
  return c;
}

namespace {

std::unique_ptr<CostModel> make_base_cost_model(const Config& config) {
  if (config.cost.model == "table")
    return std::make_unique<TableCostModel>(config.model, config.cost.table);
  if (config.cost.model == "calibrated") {
    return std::make_unique<CalibratedCostModel>(config.model, config.cluster, config.cost.profile);
  }
  if (config.cost.efficiency > 0) {
    return std::make_unique<AnalyticalCostModel>(config.model, config.cluster,
                                                 config.cost.efficiency);
  }
  return std::make_unique<AnalyticalCostModel>(
      config.model, config.cluster,
      AnalyticalOptions{.efficiency = 0,
                        .flash_attention = config.cost.flash_attention,
                        .sequence_parallel = config.parallel.sequence_parallel,
                        .tp_comm_overlap = config.cost.tp_comm_overlap,
                        .tp_overlap = config.cost.tp_overlap,
                        .gradient_accumulation_fusion = config.cost.gradient_accumulation_fusion,
                        .recompute = config.cost.recompute,
                        .recompute_modules = config.cost.recompute_modules,
                        .gradient_bytes_per_param = config.cost.memory.gradient_bytes_per_param,
                        .fp8 = config.cost.fp8,
                        .fp8_bf16_layers = config.cost.fp8_bf16_layers,
                        .microbatches = config.schedule.microbatches,
                        .expert_parallel = config.parallel.ep});
}

/// The kernel-level analytical model handles recompute itself (it knows what selective
/// recompute re-runs); every other model gets full recompute from the decorator.
bool recompute_inside(const Config& config) {
  return config.cost.model == "analytical" && config.cost.efficiency <= 0;
}

}  // namespace

std::unique_ptr<CostModel> make_cost_model(const Config& config) {
  auto base = make_base_cost_model(config);
  bool any_full = config.cost.recompute == Recompute::kFull;
  for (const Module& m : config.model.modules()) {
    for (const LayerSpec& l : m.layers)
      any_full = any_full || effective_recompute(l, config.cost.recompute) == Recompute::kFull;
  }
  if (!any_full || recompute_inside(config)) return base;
  return std::make_unique<RecomputeCostModel>(config.model, config.cost.recompute, std::move(base));
}

}  // namespace loom
