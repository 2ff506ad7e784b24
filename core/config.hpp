#pragma once
/// Configuration: a TOML file parsed once into small per-part structs.
///
/// Precedence: `--set section.key=value` > the file > the defaults written here. Unknown
/// keys are errors; every error names the file, the key (and line where the file has one)
/// and what is wrong. `loom config CONFIG --dump` prints the resolved configuration.
/// `--set` paths may index arrays of tables by element name: `model.modules.llm.frozen=false`.
#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "core/cluster.hpp"
#include "core/cost_model.hpp"
#include "core/cost_table.hpp"
#include "core/image_tokens.hpp"
#include "core/layer_kernels.hpp"
#include "core/layout.hpp"
#include "core/model.hpp"

namespace loom {

/// The single layout (pp, dp, tp for the whole model; the default) or, when
/// `[parallel.modules.<name>]` tables are given, one layout and rank set per module
/// (core/layout.hpp). Schedulers that pipeline one chain (gpipe, 1f1b) read the single
/// layout; per-module schedulers read `module_layouts`.
/// How the context-parallel ranks of a layer exchange what attention needs
/// (parallel.cp_comm; schedulers/lowering/context_parallel.hpp): Megatron-Core's
/// cp_comm_type "p2p" (ring attention, K/V blocks passed around the ring and overlapped
/// with the attention of the block in hand), "all_gather" (K/V all-gathered before the
/// attention, dK/dV reduce-scattered after its backward) or "a2a" (DeepSpeed-Ulysses:
/// Q, K, V re-sharded from sequence to heads by an all-to-all, the whole sequence attended
/// on heads / cp, the output sent back by another).
enum class CpComm : std::uint8_t { kP2p, kAllGather, kA2a };
const char* to_string(CpComm comm);  ///< "p2p", "all-gather", "a2a"

/// A parallel dimension laid over GPUs (parallel.order); tensor parallelism is always the
/// innermost, a rank being one TP group of consecutive GPUs.
enum class PlacementDim : std::uint8_t { kCp, kDp, kPp };

struct ParallelConfig {
  int pp = 1;  ///< pipeline stages per replica
  int dp = 1;  ///< data-parallel replicas of the pipeline
  int tp = 1;  ///< tensor-parallel GPUs per stage (within one node)
  /// Context parallelism (Megatron-Core's context_parallel_size): every stage of every
  /// replica runs on cp TP groups, each holding 2 of the 2 cp chunks of every sequence
  /// (chunks i and 2cp - 1 - i, the causal balance); gradients reduce over dp x cp.
  int cp = 1;
  CpComm cp_comm = CpComm::kP2p;
  /// Expert parallelism (Megatron-Core's expert_model_parallel_size; docs/moe.md): each
  /// MoE layer's routed experts sharded over groups of ep ranks carved out of dp x cp, its
  /// tokens dispatched to them and combined back by all-to-all; the experts' gradients
  /// reduce over the dp x cp / ep ranks holding the same experts.
  int ep = 1;
  /// parallel.order: the dimensions after tp, innermost first, over consecutive GPUs, as
  /// Megatron-Core's order string ("tp-cp-ep-dp-pp", its default, puts a stage's
  /// data-parallel and expert-parallel ranks on neighbouring GPUs). Loom's default is
  /// "tp-cp-pp-dp": a replica's pipeline on consecutive GPUs.
  std::array<PlacementDim, 3> order = {PlacementDim::kCp, PlacementDim::kPp, PlacementDim::kDp};
  bool default_order() const {
    return order == std::array{PlacementDim::kCp, PlacementDim::kPp, PlacementDim::kDp};
  }
  /// Megatron sequence parallelism: TP reduce-scatter/all-gather instead of all-reduce,
  /// norm and dropout activations split over the TP group (Korthikanti et al. 2022).
  bool sequence_parallel = false;
  /// Megatron-LM's overlap_grad_reduce: the data-parallel gradient all-reduce runs in
  /// buckets, each issued asynchronously as soon as the last microbatch's backward has
  /// produced its gradients (schedulers/lowering/gradient_buckets.hpp).
  bool overlap_grad_reduce = false;
  /// Fully sharded data parallelism (PyTorch FSDP2, Zhao et al. VLDB'23; ZeRO-3,
  /// Rajbhandari et al. SC'20 §5.3): parameters, gradients and optimizer state sharded over
  /// the data-parallel replicas; each layer's parameters all-gathered before its forward
  /// and backward (prefetched one layer ahead), its gradients reduce-scattered after its
  /// last backward (schedulers/lowering/pass_fsdp.cpp).
  bool fsdp = false;
  /// FSDP's reshard_after_forward: true frees a layer's gathered parameters after each
  /// forward and gathers them again for the backward and every microbatch; false (the
  /// default with pp > 1, as torchtitan sets it) gathers a stage's parameters once per step
  /// and holds them, with its gradients unsharded, until the stage's last backward.
  bool fsdp_reshard_after_forward = true;
  /// Parameters per gradient bucket; 0 = Megatron-Core's default, max(40M, 1M x dp)
  /// (DistributedDataParallelConfig.bucket_size).
  double grad_bucket_size = 0;
  /// Resolved per-module layouts, index = module index; empty = single layout.
  PerModule<ModuleLayout> module_layouts;
};

/// The largest tensor-parallel degree any module runs: parallel.tp, or the largest of the
/// per-module layouts' when there are any.
inline int max_tensor_parallel(const ParallelConfig& p) {
  int tp = p.tp;
  for (const ModuleLayout& l : p.module_layouts) tp = std::max(tp, l.tp);
  return tp;
}

/// Which per-layer costs the stage partitioner balances (dissertation §3.3.1):
/// `true` the frozen-aware F + Bd + Bw of Eq 3.2; `naive` F + 2F for every layer, what
/// frozen-unaware systems assume.
enum class PartitionView { kTrue, kNaive };

/// One value of a scheduler's own option, as written: under `[schedule.<scheduler>]`, or
/// (deprecated, one release) flat under `[schedule]`. Core keeps it untyped; the scheduler
/// that declares the option types and checks it (schedulers/scheduler_options.hpp).
struct OptionValue {
  using Value = std::variant<bool, std::int64_t, double, std::string, std::vector<std::int64_t>>;
  Value value;
  std::string origin;  ///< where it was written, for errors: "file:line" or "file (--set)"
};
using OptionTable = std::map<std::string, OptionValue>;

/// What every scheduler shares. Options of one scheduler live in its own table,
/// `[schedule.<name>]`, declared by the scheduler (schedulers/scheduler_options.hpp).
struct ScheduleConfig {
  std::string name = "1f1b";  ///< scheduler registry name
  int microbatches = 8;       ///< per pipeline replica
  int microbatch_size = 1;    ///< samples per microbatch
  /// Samples per iteration over all data-parallel replicas; 0 = microbatches x
  /// microbatch_size x dp. Given, it sets `microbatches`, so a sweep over microbatch_size
  /// or dp keeps the batch (Megatron's global_batch_size).
  int global_batch = 0;
  PartitionView partition_view = PartitionView::kTrue;
  std::vector<int> stage_layers;  ///< optional explicit layers per stage (overrides the DP)
  /// Megatron's pipeline layout string as written (core/pipeline_layout.hpp); when given,
  /// stage_layers holds what it resolves to.
  std::string layout;
  /// `[schedule.<scheduler>]` tables: scheduler name -> option key -> value as written.
  std::map<std::string, OptionTable> options;
  /// Scheduler options written flat under `[schedule]` as earlier releases took them
  /// (`schedule.chunks`): they still apply, with a warning naming the new key.
  OptionTable flat_options;
};

struct CostConfig {
  std::string model = "analytical";  ///< analytical | table | calibrated
  /// analytical: fraction of peak FLOP/s reached; 0 (unset) = the kernel-level model.
  double efficiency = 0;
  std::string profile;                      ///< profile CSV (calibrated)
  std::map<std::string, TableEntry> table;  ///< per module (table)
  /// none | selective (attention core re-run; analytical kernel-level only) | full (layers
  /// keep only their input; backward re-runs the forward, core/cost_recompute.hpp).
  Recompute recompute = Recompute::kNone;
  /// cost.recompute_modules: what selective recompute re-runs (Megatron-Core's
  /// recompute_modules; default core_attn): core_attn, layernorm, moe_act, mlp.
  RecomputeModules recompute_modules = {};
  bool flash_attention = true;      ///< cost.attention = "flash" | "flash2" | "unfused"
  bool flash2 = false;              ///< "flash2": FlashAttention-2's speed, not TE's kernel's
  Fp8Recipe fp8 = Fp8Recipe::kOff;  ///< cost.fp8 = "off" | "delayed" | "current" | "mx"
  /// cost.fp8_bf16_layers: the first and the last N transformer layers of each language
  /// model run their linears in BF16 under FP8 (Megatron's num_layers_at_start/end_in_bf16).
  int fp8_bf16_layers = 0;
  bool tp_comm_overlap = false;
  /// cost.tp_overlap: how the overlap splits the GEMMs (read only with tp_comm_overlap):
  /// "ring-exchange" (default, what Transformer Engine's userbuffers run), its
  /// "ring-exchange-aggregate" form, or "ideal" (GEMMs whole, communication hidden free).
  TpOverlap tp_overlap = TpOverlap::kRingExchange;
  /// cost.gradient_accumulation_fusion: each microbatch's wgrad GEMM accumulates into the
  /// fp32 gradient buffer itself (Megatron-Core's gradient_accumulation_fusion, TE's
  /// fuse_wgrad_accumulation) instead of a separate add per layer; default false.
  bool gradient_accumulation_fusion = false;
  /// Kernel-time noise (core/kernel_jitter.hpp): relative standard deviation of every
  /// compute op's time, and its seed; 0 = deterministic costs.
  double jitter = 0;
  int jitter_seed = 1;
  MemoryConstants memory;
};

struct WorkloadConfig {
  std::map<std::string, int> tokens = {{"text", 1024}};  ///< per sample, synthetic
  std::string csv;  ///< samples CSV; replaces the synthetic samples when set
  /// Seeded dataset-like generator (core/workload_gen.hpp): synthchartnet, llava-150k,
  /// chartqa, cocoqa; replaces the synthetic samples when set (not with `csv`).
  std::string dataset;
  int seed = 1;    ///< generator seed
  int offset = 0;  ///< first sample of the iteration (ids from the generator, rows of the CSV)
  /// How an image becomes vision tokens where images are given by size (the generators,
  /// a CSV's `<modality>_resolution` columns): core/image_tokens.hpp.
  ImageTokenRule image_tokens;
  /// Sequence packing (core/packing.hpp): 0 = none, else samples packed first-fit into
  /// sequences of at most this many LLM tokens, a pack being one sample to the schedulers.
  int pack_tokens = 0;
  /// Generators: probabilities of 0, 1, 2, ... images a sample; empty = the dataset's own.
  std::vector<double> images_per_sample;
};

struct SimConfig {
  std::string backend = "simgrid";     ///< simgrid | evaluator
  std::string network_model = "CM02";  ///< SimGrid network model (CM02 or LV08)
  /// Simulate identical data-parallel replicas once (core/replica_fold.hpp); `--no-fold`.
  bool fold = true;
};

/// `[replay]`: the fault-tolerance policies of `loom replay` (dissertation ch. 2). Costs
/// are explicit parameters; the per-model values of the Oobleck artifact (dissertation
/// Table 2.2) are in configs/paper/oobleck-*-measured.toml.
struct ReplayConfig {
  int fault_tolerance = 1;       ///< f: Oobleck keeps >= f+1 pipelines (§2.3)
  int global_batch = 0;          ///< samples per iteration; 0 = dp x microbatches x microbatch_size
  int min_pipeline_nodes = 0;    ///< n0 (nodes of the smallest pipeline); 0 = from the plan
  std::string throughput_table;  ///< measured samples/s by live nodes (JSON or CSV)
  std::string throughput_model;  ///< model key inside a JSON table holding several
  double reconfiguration_s = 2;  ///< Oobleck: fixed reinstantiation cost, s (artifact)
  int checkpoint_interval = 10;  ///< Varuna-like: iterations between checkpoints (§2.7.1)
  double checkpoint_save_s = 11.2;  ///< Varuna-like: synchronous save, s (artifact, GPT-3 med.)
  double restart_s = 78.7;          ///< full restart + checkpoint load, s (artifact, GPT-3 med.)
  int baseline_pp = 0;              ///< Varuna/Bamboo pipeline depth; 0 = parallel.pp (sim)
  /// The scheduler the pipelines of oobleck and varuna-like run (templates and grids):
  /// any registered one, e.g. entrain for a vision-language model; bamboo-like always runs
  /// the `bamboo` schedule.
  std::string scheduler = "1f1b";
  /// Bamboo's microbatch size (dissertation Table 2.1: the largest that fits with its
  /// redundant copy); 0 = schedule.microbatch_size.
  int bamboo_microbatch_size = 0;
  /// Measured mode: Bamboo's own measured throughput by live nodes (same formats and model
  /// key as throughput_table); "" = plain training's table scaled by the bamboo schedule's
  /// simulated cost against plain 1F1B.
  std::string bamboo_throughput_table;
  /// Measured mode: Varuna's own measured throughput by live nodes (same formats and model
  /// key); "" = plain training's table with Varuna's grid.
  std::string varuna_throughput_table;
  double bamboo_failover_s = 20;     ///< local rendezvous after a failover, s
  double bamboo_reconfigure_s = 30;  ///< global rendezvous to re-form pipelines, s
  double bamboo_join_delay_s = 45;   ///< a joined node is usable after this, s
  /// Bamboo's activation bytes relative to the config's dtype: it trains without activation
  /// checkpointing (§2.7.1 footnote 2), so configs whose 2-byte activations stand in for
  /// TF32 + checkpointing (configs/paper/oobleck-gpt3-*.toml) set 2 (TF32: 4 bytes).
  double bamboo_activation_factor = 1;
  double notice_s = 0;  ///< preemption notice given to every removal, s
  /// When joined nodes enter the job (oobleck, varuna-like; bamboo-like keeps Bamboo's
  /// rules): "next-reconfiguration" (they wait for the next removal, or enter at once while
  /// the job cannot train: the Oobleck artifact's simulator) or "immediate" (the job
  /// reconfigures at the first iteration boundary after they are ready).
  std::string join = "next-reconfiguration";
  /// Oobleck when several nodes leave at one instant, or one leaves during a
  /// reconfiguration: "one-reconfiguration" (Oobleck's design, §2.5) or "stall" (the
  /// artifact simulator's: each removal opens its own rendezvous, the later ones find it
  /// empty and stop the job until a node becomes ready or leaves).
  std::string concurrent_removals = "one-reconfiguration";
  double node_ready_s = 45;  ///< a joined node is usable after this, s (artifact: 45 s)
};

/// `[validation]`: a published run this config reproduces (validation/, `loom validate`).
struct ValidationConfig {
  double measured_iteration_s = 0;  ///< 0 = the config is not a validation run
  std::string source;               ///< paper, table and row
};

struct Config {
  std::string path;
  Model model;
  Cluster cluster;
  CostConfig cost;
  ParallelConfig parallel;
  ScheduleConfig schedule;
  WorkloadConfig workload;
  SimConfig sim;
  ReplayConfig replay;
  ValidationConfig validation;
  std::string resolved_toml;  ///< the configuration as resolved, for --dump
};

/// Where a config comes from: a TOML file, or a TOML document built in memory (the Python
/// module's dicts). `path` names it in messages, and files the config names resolve against
/// its folder (a document's path may name no file: "<dict>" resolves against the working
/// directory).
struct ConfigSource {
  ConfigSource(std::string file) : path(std::move(file)) {}  // NOLINT: a path is a source
  ConfigSource(const char* file) : path(file) {}             // NOLINT
  ConfigSource(std::string name, std::string toml_text)
      : path(std::move(name)), document(std::move(toml_text)), in_memory(true) {}
  std::string path;
  std::string document;  ///< the TOML text when in_memory
  bool in_memory = false;
};

/// Loads `source` and applies `overrides` ("a.b=value"). Throws InputError.
Config load_config(const ConfigSource& source, const std::vector<std::string>& overrides);

/// The cost model the config selects (the config must outlive it).
std::unique_ptr<CostModel> make_cost_model(const Config& config);

}  // namespace loom
