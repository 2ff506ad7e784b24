// Cornstarch (cornstarch-arxiv §4.1 modality parallelism, §4.2 / dissertation §3.3.1
// frozen-aware partitioning, §5.2 Algorithm 1 loosely-coupled auto-parallelization).
//
// Modality parallelism: each encoder branch (encoder + projector) gets its own pipeline
// stages on its own ranks, the LLM gets its own, so independent encoders run
// concurrently; the LLM's forward of microbatch m starts once every encoder's forward of
// m has arrived (fan-in at the LLM's first stage), and each encoder's backward of m waits
// for the LLM's backward of m. Stage orders are 1F1B on the stage DAG (Fig 6): a stage
// warms up with as many forwards as there are stages on its longest path to the end.
//
//   vision stages v0 v1 ─┐
//                        ├─> llm stages l0 l1 l2
//   audio stage  a0 ─────┘
//
// Algorithm 1 with a stage budget of parallel.pp ranks per replica:
//   for each LLM stage count i:      t_i = Eq 3.5 bottleneck of the LLM in i stages
//     for each encoder e:            the fewest stages whose Eq 3.5 bottleneck <= t_i
//   keep the candidates that fit the budget (one that does not fits by taking stages
//   from the encoder with the most); return the one with the least get_iteration_time.
// Per-layer costs come from the configured view (`true` = Eq 3.2/3.3). Reconstructed:
// get_iteration_time is the contention-free evaluator on the candidate lowered with the
// same view (the paper profiles).
//
// Placement (`[schedule.cornstarch] modality_parallelism`, the `modality_parallelism` argument of
// Cornstarch's API): `parallel` is the search above; `colocated` fuses the encoders ahead
// of the LLM as encoders-colocated does, partitioned under the same view (dissertation
// Table 3.2's rows); `auto` (default) takes whichever the planner predicts faster, our
// reading of §3.5.2's "It chooses better modality parallelism".
//
// With per-module layouts ([parallel.modules], core/layout.hpp) there is no search: each
// module gets its own pp stages, tp and disjoint GPUs (non-colocated), all with
// parallel.dp replicas.
#include <algorithm>
#include <limits>
#include <optional>

#include "core/errors.hpp"
#include "core/index.hpp"
#include "schedulers/multimodal/multimodal.hpp"

namespace loom {
namespace {

struct Allocation {
  int llm = 1;
  std::vector<int> encoders;  ///< stages per branch
};

/// Algorithm 1, lines 3-7: the candidate allocations.
std::vector<Allocation> candidates(const Branches& branches, const std::vector<double>& costs,
                                   int budget) {
  const int nb = isize(branches.encoders);
  std::vector<Allocation> out;
  for (int i = 1; i <= budget - nb && i <= isize(branches.llm); ++i) {
    const double t_i = branch_bottleneck(branches.llm, costs, i);
    Allocation a{i, {}};
    int used = i;
    for (const auto& layers : branches.encoders) {
      int k = 1;
      const int most = std::min(isize(layers), budget);
      while (k < most && branch_bottleneck(layers, costs, k) > t_i) ++k;
      a.encoders.push_back(k);
      used += k;
    }
    if (used <= budget) {
      out.push_back(a);
      continue;
    }
    // Reconstructed: the paper assumes the GPUs suffice; when they do not, take stages
    // from the encoder holding the most (down to one each) until the allocation fits.
    while (used > budget) {
      auto most = std::max_element(a.encoders.begin(), a.encoders.end());
      if (*most <= 1) break;
      --*most;
      --used;
    }
    if (used <= budget) out.push_back(a);
  }
  return out;
}

/// The layout of the module group a branch (or the LLM part) starts with, checked for
/// what this lowering models: modality parallelism on disjoint GPUs, one DP degree.
const ModuleLayout& checked_layout(const SchedulingProblem& problem, int layer) {
  const Model& model = *problem.model;
  const ModuleId module = model.module_of(layer);
  const ModuleLayout& l = problem.parallel.module_layouts[module];
  const std::string key = "parallel.modules." + model.module(l.owner).name;
  if (l.dp != problem.parallel.dp)
    throw InputError(key + ".dp: cornstarch runs parallel.dp = " +
                     std::to_string(problem.parallel.dp) + " replicas of every module, got " +
                     std::to_string(l.dp) + " (modules with their own DP: hetero-noncolocated)");
  if (l.cp != 1) throw InputError(key + ".cp: cornstarch's pipeline lowering models cp = 1");
  for (const ModuleLayout& other : problem.parallel.module_layouts) {
    if (other.owner != l.owner && colocated(other, l))
      throw InputError(key +
                       ".gpus: modality parallelism puts every module on GPUs of its "
                       "own; '" +
                       model.module(other.owner).name +
                       "' shares them (colocated layouts: hetero-colocated)");
  }
  return l;
}

void place(StageGraph& graph, StageId first_stage, const ModuleLayout& l, int dp) {
  for (int k = 0; k < l.pp; ++k) {
    StageSpec& stage = graph[first_stage + k];
    stage.tp = l.tp;
    for (int d = 0; d < dp; ++d) stage.gpu.push_back(l.stage_gpu(d, k));
  }
}

/// Per-module layouts given: each module's own pp, tp and GPUs (no search).
StageGraph explicit_graph(const SchedulingProblem& problem, const Branches& branches,
                          const std::vector<double>& costs) {
  const Model& model = *problem.model;
  const int dp = problem.parallel.dp;
  StageGraph graph;
  auto add = [&](const std::vector<int>& layers, const std::string& what) {
    const ModuleLayout& l = checked_layout(problem, layers.front());
    const StageId first = graph.next_id();
    for (auto& piece : partition_branch(model, layers, costs, l.pp, what))
      graph.push_back(StageSpec{.segments = piece});
    place(graph, first, l, dp);
  };
  for (size_t b = 0; b < branches.encoders.size(); ++b)
    add(branches.encoders[b], "parallel.modules." + branches.names[b] + ".pp");
  add(branches.llm, "LLM pp");
  return graph;
}

/// Where cornstarch places the encoders (cornstarch-arxiv §4.1 and §6.3; its API's
/// `modality_parallelism` argument): `parallel` each encoder branch on stages of its own,
/// `colocated` the encoders fused ahead of the LLM (the placement of dissertation Table
/// 3.2, partitioned frozen-aware), `auto` the one the planner predicts faster (§3.5.2:
/// "It chooses better modality parallelism").
struct CornstarchOptions {
  std::string modality_parallelism = "auto";
  std::optional<int> encoder_stages;
};

const std::string kEncoderStagesHelp = encoder_stages_help(
    "colocated placement: pipeline stages of the fused encoders",
    "by balance, E >= 1, and with modality_parallelism = \"auto\" E = 0 competes too");

const OptionSet<CornstarchOptions> kOptions{
    {"modality_parallelism", &CornstarchOptions::modality_parallelism,
     "encoder placement: \"parallel\" each encoder on stages of its own, \"colocated\" the "
     "encoders fused ahead of the LLM, \"auto\" the one predicted faster",
     one_of({"auto", "parallel", "colocated"})},
    {"encoder_stages", &CornstarchOptions::encoder_stages, kEncoderStagesHelp.c_str(), at_least(0)},
};

}  // namespace

std::vector<OptionSpec> cornstarch_options() {
  return kOptions.specs();
}

Schedule generate_cornstarch(const SchedulingProblem& problem) {
  const char* name = "cornstarch";
  const Model& model = *problem.model;
  const Branches branches = split_branches(model, name);
  if (!problem.parallel.module_layouts.empty())
    return lower_multimodal(problem, name, explicit_graph(problem, branches, view_costs(problem)));
  const CornstarchOptions o = kOptions.read(problem.schedule, name);
  const bool parallel_only = o.modality_parallelism == "parallel";
  const bool colocated_only = o.modality_parallelism == "colocated";
  const int budget = problem.parallel.pp;
  const std::vector<double> costs = view_costs(problem);
  // Algorithm 1, lines 8-10: the candidate with the least iteration time (ties: the first,
  // i.e. fewer LLM stages). With `auto`, the colocated placement competes too and wins only
  // when strictly faster (modality parallelism is the paper's default).
  double best = std::numeric_limits<double>::infinity();
  StageGraph chosen;
  auto consider = [&](StageGraph graph) {
    const double t = predicted_iteration_s(problem, graph);
    if (t < best) {
      best = t;
      chosen = std::move(graph);
    }
  };
  if (!colocated_only) {
    const std::vector<Allocation> options = candidates(branches, costs, budget);
    if (options.empty() && (parallel_only || budget < 2)) {
      throw InputError("parallel.pp: " + std::to_string(budget) + " stages cannot give each of " +
                       std::to_string(branches.encoders.size()) +
                       " encoder(s) and the LLM a stage of its own (modality parallelism)");
    }
    for (const Allocation& a : options)
      consider(disaggregated_graph(model, branches, costs, a.encoders, a.llm));
  }
  if (colocated_only || chosen.empty()) {
    consider(encoders_colocated_graph(problem, branches, costs, name, o.encoder_stages));
  } else if (!parallel_only) {
    try {  // a model whose encoders cannot share pp stages keeps modality parallelism
      consider(encoders_colocated_graph(problem, branches, costs, name, o.encoder_stages));
    } catch (const InputError&) {
    }
  }
  // Reconstructed, Loom's: the planner also weighs the encoders on the LLM's first stage
  // (Megatron-Core's LLaVA layout), which wins where the encoders are small next to an
  // LLM stage (a 0.3B ViT before a 13B LLM) and a stage of their own would idle.
  if (!parallel_only && !colocated_only && !o.encoder_stages)
    consider(encoders_colocated_graph(problem, branches, costs, name, 0));
  return lower_multimodal(problem, name, chosen);
}

}  // namespace loom
