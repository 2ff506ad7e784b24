#pragma once
/// The lowering's passes (lowering.hpp lists them in order). Each reads the context and
/// adds one kind of thing to the Schedule, so a test can run any prefix of them.
#include <vector>

#include "core/cost_model.hpp"
#include "core/dataflow.hpp"
#include "core/schedule.hpp"
#include "schedulers/lowering/lowering.hpp"
#include "schedulers/lowering/tied_embedding.hpp"

namespace loom::lowering {

/// A stage's TP width: its own (per-module layouts) or parallel.tp.
inline int stage_tp(const SchedulingProblem& problem, const StageSpec& spec) {
  return spec.tp > 0 ? spec.tp : problem.parallel.tp;
}
/// The group a stage's optimizer state shards over (parallel.distributed_optimizer): the
/// data-parallel replicas, or the DP x CP grid of its module (per-module layouts).
inline int optimizer_shards(const SchedulingProblem& problem, const StageSpec& spec) {
  return spec.layout ? spec.layout->dp * spec.layout->cp : problem.data_parallel();
}

/// Everything the lowering needs about one (replica, microbatch).
struct MicrobatchCosts {
  std::vector<PassCost> layer;     ///< per layer, in the lowering's cost view
  std::vector<double> activation;  ///< bytes kept per layer
  std::vector<double> output;      ///< bytes of each layer's output
};

/// What every pass reads: the problem, the scheduler's decision, the layer graph and
/// where each layer lives.
struct Context {
  Context(const SchedulingProblem& problem, const PipelinePrograms& programs, LoweringCosts costs);

  const SchedulingProblem& problem;
  const Model& model;
  const PipelinePrograms& programs;
  LayerGraph graph;  ///< naive view: every layer needs a backward
  bool naive = false;
  int replicas = 1;      ///< parallel.dp
  int microbatches = 1;  ///< per replica
  std::vector<int> stage_of_layer;
  std::vector<MicrobatchCosts> costs;     ///< [replica * microbatches + microbatch], pass 3
  std::vector<TiedEmbedding> embeddings;  ///< tied_embeddings() of the programs

  const StageSpec& stage(int s) const { return programs.stages[static_cast<size_t>(s)]; }
  int num_stages() const { return static_cast<int>(programs.stages.size()); }
  /// Global rank of replica d's rank holding `stage`.
  int rank(int replica, int stage) const {
    return replica * programs.ranks + programs.rank_of(stage);
  }
  int stage_tp(int s) const { return lowering::stage_tp(problem, stage(s)); }
  int optimizer_shards(int s) const { return lowering::optimizer_shards(problem, stage(s)); }
  /// Per-module layouts: the LLM's (the model's sink, its last layers).
  const ModuleLayout& sink_layout() const { return *stage(stage_of_layer.back()).layout; }
  bool needs_backward(const Segment& seg) const;
  const MicrobatchCosts& cost(int replica, int microbatch) const {
    return costs[static_cast<size_t>(replica * microbatches + microbatch)];
  }
};

void place_ranks(const Context& ctx, Schedule& schedule);
void assign_samples(const Context& ctx, Schedule& schedule);
void cost_microbatches(Context& ctx, const Schedule& schedule);
void expand_actions(const Context& ctx, Schedule& schedule);
void add_point_to_point(const Context& ctx, Schedule& schedule);
void add_gradient_allreduce(const Context& ctx, Schedule& schedule);
void add_optimizer_step(const Context& ctx, Schedule& schedule);
void fill_static_memory(const Context& ctx, Schedule& schedule);

}  // namespace loom::lowering
