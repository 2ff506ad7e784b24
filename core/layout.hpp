#pragma once
/// Per-module parallel layouts: each module m of the multimodal graph may have its own
/// logical layout G_m = (TP, CP, PP, DP) and its own physical rank set R_m
/// (heterogeneous-parallelism-megatron §3; Cornstarch modality parallelism,
/// cornstarch-arxiv §4.1, where each encoder branch and the LLM get their own GPUs).
///
/// Config form (absent = the single layout `parallel.pp/dp/tp` for the whole model, the
/// default every existing config uses):
///
///     [parallel.modules.llm]          # one table per encoder and per LLM module
///     tp = 2
///     pp = 2
///     gpus = "0-3"                    # R_m: GPUs 0..3 (inclusive); default "0-(size-1)"
///     [parallel.modules.vision]
///     dp = 4
///     gpus = "4-7"                    # disjoint from the LLM's: non-colocated
///
///   - tp, cp, pp, dp default to 1; tp x cp x pp x dp must equal the size of R_m.
///   - cp_mode = "split" (default) splits the module's sequences over its CP ranks;
///     "replicate" (encoders only) runs the whole TP x DP shard on every CP rank, as
///     Megatron-LM's LLaVA model runs its vision model on all images before it splits the
///     combined sequence over the LLM's CP ranks (megatron/core/models/multimodal/
///     llava_model.py, forward): the homogeneous baseline of the seed's Table A3. At cp = 1
///     the two modes are the same (accepted, so a sweep over cp may include 1).
///   - Two modules' rank sets are either identical (colocated: shared GPUs, different
///     logical grids) or disjoint (non-colocated); a partial overlap is an error.
///   - A projector without its own table follows its (first) input module: it is part of
///     that encoder's branch (Cornstarch's ModalityModule(encoder, projector)) and its
///     layers go to the encoder's last pipeline stage. Encoders and the LLM need a table.
///   - Inside R_m, GPUs are numbered as in the single layout (replica-major, then stage,
///     then CP, then TP): GPU = first_gpu + ((dp_index x pp + pp_index) x cp + cp_index)
///     x tp + tp_index, so one stage's TP x CP group is contiguous GPUs.
/// Errors name the module: InputError (exit 2) for a bad layout, InfeasibleError (exit 3)
/// for a rank set beyond the cluster.
#include <map>
#include <string>
#include <vector>

#include "core/cluster.hpp"
#include "core/model.hpp"

namespace loom {

struct ModuleLayout {
  int tp = 1;  ///< tensor-parallel GPUs per stage (inside one node)
  int cp = 1;  ///< context-parallel GPUs per stage (sequence split, or copies)
  /// cp_mode = "replicate": every CP rank computes the whole shard (no sequence split,
  /// no K/V exchange); the CP ranks are copies, as an encoder in Megatron-LM's LLaVA.
  bool cp_replicates = false;
  int pp = 1;         ///< pipeline stages of this module (its branch)
  int dp = 1;         ///< data-parallel replicas of this module
  int first_gpu = 0;  ///< R_m = GPUs [first_gpu, first_gpu + gpus)
  int gpus = 0;       ///< |R_m|; 0 before resolution means "tp x cp x pp x dp"
  /// The module whose [parallel.modules] table this layout is (a projector without a
  /// table follows its input); set by resolve_module_layouts.
  ModuleId owner{0};

  int size() const { return tp * cp * pp * dp; }
  int end_gpu() const { return first_gpu + gpus; }
  /// GPUs one pipeline stage of one replica occupies (its TP x CP group).
  int gpus_per_stage() const { return tp * cp; }
  /// First GPU of stage `pp_index` of replica `dp_index` (order above).
  int stage_gpu(int dp_index, int pp_index) const {
    return first_gpu + (dp_index * pp + pp_index) * cp * tp;
  }
};

/// Same rank set: the two modules share GPUs (colocated).
inline bool colocated(const ModuleLayout& a, const ModuleLayout& b) {
  return a.first_gpu == b.first_gpu && a.gpus == b.gpus;
}

/// Parses a rank set "first-last" (inclusive) or "n" into [first, end). Returns false on
/// malformed text.
bool parse_gpu_range(const std::string& text, int* first, int* end);

/// One layout per module (index = module index) from the `[parallel.modules]` tables
/// (`explicit_layouts`, keyed by module name; their `gpus` 0 = default rank set).
/// Checks everything listed in the header comment. Returns {} when `explicit_layouts`
/// is empty (the single-layout form).
PerModule<ModuleLayout> resolve_module_layouts(
    const Model& model, const std::map<std::string, ModuleLayout>& explicit_layouts,
    const Cluster& cluster);

/// Per-module layouts derived from the single layout (pp, dp, tp) for configs that have no
/// [parallel.modules] tables, so per-module schedulers run on them too:
///   colocated:     the LLM keeps (tp, pp, dp); each encoder (with its projectors) uses
///                  the same GPUs as one stage of tp x 1 x 1 x (pp x dp): encoder DP
///                  absorbs the LLM's pipeline ranks (the seed's colocated remap).
///   non-colocated: each encoder gets one stage, (tp, 1, 1, dp), on its own GPUs and the
///                  LLM the remaining pp - (number of encoders) stages, all within the
///                  single layout's pp x dp x tp GPUs (as Cornstarch's modality
///                  parallelism with one stage per encoder).
/// Throws InputError when pp leaves the LLM no stage (non-colocated).
PerModule<ModuleLayout> default_module_layouts(const Model& model, int pp, int dp, int tp,
                                               bool colocated_placement, const Cluster& cluster);

/// Modules grouped by layout owner, in topological order of their owners: an encoder
/// with the projectors that follow it, the LLM. What a per-module scheduler pipelines.
struct LayoutGroup {
  ModuleId owner{0};
  std::vector<ModuleId> modules;  ///< owner first, then its followers, in model order
  ModuleLayout layout;
};
std::vector<LayoutGroup> layout_groups(const Model& model, const PerModule<ModuleLayout>& layouts);

}  // namespace loom
