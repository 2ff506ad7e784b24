#pragma once
/// The lowering's passes (lowering.hpp lists them in order). Each reads the context and
/// adds one kind of thing to the Schedule, so a test can run any prefix of them.
#include <functional>
#include <map>
#include <tuple>
#include <vector>

#include "core/cost_model.hpp"
#include "core/dataflow.hpp"
#include "core/routing.hpp"
#include "core/schedule.hpp"
#include "schedulers/lowering/context_parallel.hpp"
#include "schedulers/lowering/expert_parallel.hpp"
#include "schedulers/lowering/lowering.hpp"
#include "schedulers/lowering/tied_embedding.hpp"

namespace loom::lowering {

/// The TP width a stage's layers are priced and stored at: its module's (per-module
/// layouts), its own, or parallel.tp.
inline int stage_tp(const SchedulingProblem& problem, const StageSpec& spec) {
  if (spec.layout) return spec.layout->tp;
  return spec.tp > 0 ? spec.tp : problem.parallel.tp;
}
/// The group a stage's optimizer state shards over (parallel.distributed_optimizer): the
/// data-parallel replicas, or the DP x CP grid of its module (per-module layouts).
inline int optimizer_shards(const SchedulingProblem& problem, const StageSpec& spec) {
  return spec.layout ? spec.layout->dp * spec.layout->cp
                     : problem.data_parallel() * problem.parallel.cp;
}

/// Everything the lowering needs about one (replica, microbatch).
struct MicrobatchCosts {
  std::vector<PassCost> layer;     ///< per layer, in the lowering's cost view
  std::vector<double> activation;  ///< bytes kept per layer
  PerLayer<double> output;         ///< bytes of each layer's output
  /// Per-module layouts with context parallelism: the K/V all-gather before each layer's
  /// forward (and dK/dV reduce-scatter after its backward), full buffer per CP member;
  /// empty or 0: none.
  PerLayer<double> kv_allgather = {};
  /// Single layout with parallel.cp > 1: per layer, what its split around the CP exchange
  /// needs (context_parallel.hpp); empty: cp 1.
  PerLayer<ContextParallelLayer> context_parallel = {};
  /// parallel.ep > 1: per layer, its all-to-alls and the work around them
  /// (expert_parallel.hpp); empty: ep 1.
  PerLayer<ExpertParallelLayer> expert_parallel = {};

  /// Bytes of layer l's output.
  double output_bytes(int l) const { return output[LayerId{l}]; }
  /// Layer l's K/V all-gather bytes (kv_allgather); 0: none.
  double kv_bytes(int l) const { return kv_allgather.empty() ? 0 : kv_allgather[LayerId{l}]; }
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
  int replicas = 1;  ///< parallel.dp (per-module layouts: programs.batch.module_replicas)
  /// parallel.cp: the IR ranks of one pipeline rank of a replica (1 under per-module
  /// layouts, which place their CP ranks as stage copies). A replica's CP ranks are its
  /// `cp` lanes: lane = replica x cp + CP rank; every lane runs the replica's rank orders
  /// on its shard of the replica's samples.
  int cp = 1;
  /// parallel.ep: lanes per expert-parallel group (expert_parallel.hpp).
  int ep = 1;
  /// Router loads drawn so far, by (layer, microbatch, EP group): every member of a group
  /// and every pass of a microbatch asks for the same draw.
  mutable std::map<std::tuple<int, int, int>, ExpertLoad> expert_loads;
  int microbatches = 1;  ///< per replica
  PerLayer<StageId> stage_of_layer;
  PerReplica<PerMicrobatch<MicrobatchCosts>> costs;  ///< [replica][microbatch], pass 3
  std::vector<TiedEmbedding> embeddings;             ///< tied_embeddings() of the programs
  /// joins_next[r][i]: op i of global rank r's expanded program runs in one unit with op
  /// i + 1 (RankAction::with_next: an overlapped pair or a unit); pass 4 fills it, pass 5
  /// reads it.
  PerRank<std::vector<bool>> joins_next;

  const StageSpec& stage(StageId s) const { return programs.stages[s]; }
  int num_stages() const { return programs.stages.ssize(); }
  IdRange<StageId> stage_ids() const { return programs.stages.ids(); }
  IdRange<MicrobatchId> microbatch_ids() const { return IdRange<MicrobatchId>(microbatches); }
  StageId stage_of(int layer) const { return stage_of_layer[LayerId{layer}]; }
  /// Replicas x CP ranks: the copies of the pipeline the lowering writes programs for.
  int lanes() const { return replicas * cp; }
  int replica_of_lane(int lane) const { return lane / cp; }
  /// The Schedule's rank for lane `lane`'s rank `local` (PipelinePrograms numbers a
  /// replica's ranks from 0); with cp 1 a lane is a replica.
  RankId global_rank(int lane, PipelineRank local) const {
    return RankId{lane * programs.ranks + local.value()};
  }
  /// Global rank of lane `lane`'s rank holding `stage`.
  RankId rank(int lane, StageId stage) const { return global_rank(lane, programs.rank_of(stage)); }
  int stage_tp(StageId s) const { return lowering::stage_tp(problem, stage(s)); }
  /// GPUs of the rank a copy runs on: a TP group, or one GPU (StageSpec::tp).
  int stage_rank_width(const StageSpec& spec) const {
    return spec.tp > 0 ? spec.tp : lowering::stage_tp(problem, spec);
  }
  int optimizer_shards(StageId s) const { return lowering::optimizer_shards(problem, stage(s)); }
  /// Per-module layouts: the LLM's (the model's sink, its last layers).
  const ModuleLayout& sink_layout() const { return *stage(stage_of_layer.back()).layout; }
  bool needs_backward(const Segment& seg) const;
  const MicrobatchCosts& cost(int replica, MicrobatchId microbatch) const {
    return costs[ReplicaId{replica}][microbatch];
  }
  MicrobatchCosts& cost(int replica, MicrobatchId microbatch) {
    return costs[ReplicaId{replica}][microbatch];
  }

 private:
  /// Throw std::logic_error when the programs request features that cannot go together,
  /// or their per-module-layout fields disagree (a scheduler's bug, not bad input).
  void check_features() const;
  void check_module_layouts() const;
};

void place_ranks(const Context& ctx, Schedule& schedule);

// Per-module layouts (pass_module_layouts.cpp).
/// The group of `members` in schedule.groups, added when new.
GroupId group_id(Schedule& schedule, const std::vector<RankId>& members);
/// The K/V all-gather of `layer_op` (one layer's compute) on the CP ring of `rank`'s GPU;
/// the caller puts it before a forward and after a backward (the dK/dV reduce-scatter, the
/// same volume). None for a non-transformer layer or a backward the layer does not run.
void add_kv_exchange(const Context& ctx, Schedule& schedule, std::vector<Op>& program, RankId rank,
                     const Compute& layer_op, double bytes);
/// The colocated boundary transform a `boundary` action stands for, on `rank`.
void expand_boundary(const Context& ctx, Schedule& schedule, std::vector<Op>& program, RankId rank,
                     const RankAction& a);
/// Pass 6 under per-module layouts: each stage's gradients over its copies, one ring per
/// TP shard, last stage first.
void add_module_allreduce(const Context& ctx, Schedule& schedule,
                          const std::function<double(PipelineRank)>& extra_bytes);
void assign_samples(const Context& ctx, Schedule& schedule);
// Context parallelism in the single layout (pass_context_parallel.cpp).
/// Pass 3's costs of one CP rank: every layer's share of `batch`, with its split.
void cost_context_parallel(const Context& ctx, const std::vector<const Sample*>& batch,
                           MicrobatchCosts& mc);
/// Pass 4: one layer's pass `c` (one layer, costs filled) on lane `lane` as its parts
/// around the CP exchange, appended to `program`; `c` alone where the layer has none.
void expand_context_parallel(const Context& ctx, Schedule& schedule, std::vector<Op>& program,
                             int lane, const Compute& c, const ContextParallelLayer& layer);
// Expert parallelism (pass_expert_parallel.cpp).
/// Pass 3's MoE layer costs of one rank's share of `batch`: the phases and dispatch bytes.
void cost_expert_parallel(const Context& ctx, const std::vector<const Sample*>& batch,
                          MicrobatchCosts& mc);
/// Pass 4: one MoE layer's pass `c` on lane `lane` as its parts around the dispatch and
/// combine all-to-alls, appended to `program`; the part outside them goes through
/// `push_outside` (the CP exchange's split, or as it is).
void expand_expert_parallel(const Context& ctx, Schedule& schedule, const Compute& c,
                            const ExpertParallelLayer& layer,
                            const std::function<void(const Compute&)>& push_outside,
                            std::vector<Op>& program, int lane);
/// An overlapped pair's forward and backward ops (DualPipe's F&B chunk, DeepSeek-V3 §3.2.1
/// Figure 4; Megatron's combined 1F1B) woven so that each half's all-to-alls run under the
/// other half's compute: each half runs until its next all-to-all, issues it asynchronously
/// and hands over; its next compute waits for it (Compute::async_pending). Computes that run
/// while the other half's all-to-all is in flight take `slowdown` x their time (the SMs the
/// all-to-all uses, all_to_all_overlap_slowdown).
std::vector<Op> weave_overlapped_pair(const std::vector<Op>& forward,
                                      const std::vector<Op>& backward, double slowdown);
/// DeepSeek-V3's stated SM split under overlap: gpu.sms / (gpu.sms - 20).
double all_to_all_overlap_slowdown(const GpuSpec& gpu);
/// The router's draw for MoE layer `c.first_layer`, microbatch `c.microbatch` and lane
/// `lane`'s expert-parallel group (cached in the context); none when the routing is balanced
/// and nothing is dropped.
const ExpertLoad* routed_load(const Context& ctx, const Compute& c, int lane);
/// A split backward's weight-gradient half (W, which moves no tokens) of a MoE layer with its
/// experts' part scaled to the rank's routed share.
Compute scale_routed_weight_pass(const Context& ctx, Compute c, const ExpertParallelLayer& layer,
                                 int lane);
void cost_microbatches(Context& ctx, const Schedule& schedule);
void expand_actions(Context& ctx, Schedule& schedule);
void add_point_to_point(const Context& ctx, Schedule& schedule);
/// parallel.fsdp (pass_fsdp.cpp): each compute's parameter all-gather, prefetched one
/// layer ahead, and each trainable layer's gradient reduce-scatter after its last backward.
void add_parameter_gathers(const Context& ctx, Schedule& schedule);
void add_gradient_allreduce(const Context& ctx, Schedule& schedule);
/// Parameters of `layer` whose gradients reduce over every lane: all of them, or with
/// expert parallelism all but the routed experts.
double data_parallel_parameters(const Context& ctx, int layer);
/// parallel.ep: each rank's routed experts' gradients over the lanes holding the same
/// experts (every ep-th lane), after the data-parallel reduction.
void add_expert_gradient_allreduce(const Context& ctx, Schedule& schedule);
void add_optimizer_step(const Context& ctx, Schedule& schedule);
void fill_static_memory(const Context& ctx, Schedule& schedule);

}  // namespace loom::lowering
