#pragma once
/// Oobleck's planner (dissertation ch. 2 §2.4-2.5, App. A): pipeline templates generated once
/// per job, instantiated into >= f+1 heterogeneous pipelines that use every available node,
/// batch distribution across them, and reinstantiation when nodes are lost or added.
///
/// Glossary (dissertation §2.4):
///   N      initial (maximum) node count;  N'  nodes available now
///   M      GPUs per node;  f  fault-tolerance threshold (pipeline failures survived)
///   n_i    nodes of template i; n_0 minimal by memory, templates n_0 .. N - f n_0
///   S      stages of a template; k* its slowest stage; N_b microbatches of a pipeline
///   B, b   global batch and microbatch size (samples)
///
/// Data flow: LayerProfile (from a Loom model + cost model, or a CSV) -> PlanningProblem ->
/// generate_templates -> instantiate (Eq 2.5) + distribute_batch (Eq 2.6) -> Instantiation;
/// on an availability event reinstantiate() -> new Instantiation + the layer copies.
/// Everything here is a pure function of its inputs (deterministic, no I/O but the CSV
/// reader, no printing).
#include <string>
#include <vector>

#include "core/cluster.hpp"
#include "core/cost_model.hpp"
#include "core/index.hpp"
#include "core/model.hpp"
#include "core/workload.hpp"

namespace loom::oobleck {

// ---------------------------------------------------------------------------------------
// Profile

/// One layer, one microbatch of size b, on one GPU.
struct LayerCost {
  double forward_s = 0;
  double backward_s = 0;
  /// Bytes the layer needs on one GPU for training: weights, gradients, optimizer state
  /// and the activations it keeps (sharded over the GPUs of a stage, §2.6 FSDP).
  double memory_bytes = 0;
  /// Bytes of model state (weights + optimizer state) a reinstantiated node copies from a
  /// surviving replica (§2.5.1). Defaults to memory_bytes when a CSV does not give it.
  double state_bytes = 0;
  /// Two-member ring all-reduce of the layer's gradients inside one node (s); a ring of r
  /// members takes 2(r-1)/r times this. Used for the intra-stage sharding on d > 1 GPUs.
  double allreduce_in_node_s = 0;
  /// Same across nodes (s): the layer-granular gradient sync between pipelines (§2.6.1).
  double allreduce_across_nodes_s = 0;
};

using LayerProfile = std::vector<LayerCost>;

/// Profile of a Loom model: per layer, effective F and B (frozen status applied, Eq 3.2) for
/// one microbatch `microbatch` on one GPU; memory = weights (layer dtype) + gradients and
/// optimizer state (trainable layers) + activations; all-reduce costs of the layer's
/// gradient bytes on the cluster's intra- and inter-node links.
LayerProfile profile_from_model(const Model& model, const CostModel& cost,
                                const std::vector<const Sample*>& microbatch,
                                const Cluster& cluster, const MemoryConstants& memory);

/// Reads a CSV with header `layer,forward_s,backward_s,memory_bytes` and optional columns
/// `state_bytes,allreduce_in_node_s,allreduce_across_nodes_s`; layers numbered 0.. in order.
/// Throws InputError naming `path:line` and the column on any malformed value.
LayerProfile load_profile_csv(const std::string& path);

// ---------------------------------------------------------------------------------------
// Problem and templates

struct PlanningProblem {
  LayerProfile layers;
  int gpus_per_node = 1;        ///< M
  double gpu_memory_bytes = 0;  ///< per GPU; 0 = unlimited
  int fault_tolerance = 0;      ///< f
  int max_nodes = 1;            ///< N
  int microbatch_size = 1;      ///< b (samples); the profile is for one such microbatch
  int global_batch = 1;         ///< B (samples)
};

/// N': a number of nodes, as the rows of Eq 2.5's X(p', N') and the instantiation's
/// reachability table are indexed.
using NodeCount = Id<struct NodeCountTag>;
/// A node of one pipeline, 0 .. nodes-1 (TemplateStage::node), not a node id.
LOOM_DECLARE_ID(PipelineNode, PerPipelineNode);
/// A pipeline template j: an index into generate_templates' table (n_0 + j nodes) and into
/// Eq 2.5's X (x_j pipelines of template j).
LOOM_DECLARE_ID(TemplateId, PerTemplate);

/// One stage of a template: layers [layer_begin, layer_end) on `gpus` GPUs of one node.
struct TemplateStage {
  int layer_begin = 0;
  int layer_end = 0;
  int gpus = 1;
  PipelineNode node;        ///< node inside the pipeline, 0 .. nodes-1
  int first_gpu = 0;        ///< first GPU inside that node
  double forward_s = 0;     ///< F_{s,d} of one microbatch
  double backward_s = 0;    ///< B_{s,d}
  double memory_bytes = 0;  ///< per GPU
};

/// A pipeline template (§2.4.1): its node count and the stage mapping minimising
/// T1 + T2 + T3 (Eq 2.1-2.4).
struct PipelineTemplate {
  int nodes = 0;
  std::vector<TemplateStage> stages;
  double t1_s = 0;        ///< one F + B of every stage (warm-up and drain)
  double t3_s = 0;        ///< F + B of the stages from k* to the last
  int slowest_stage = 0;  ///< k*
  double slowest_s = 0;   ///< (F + B) of stage k*
  /// T1 + T2 + T3 with N_b = 4S as in planning (§2.4.1.2).
  double planned_time_s = 0;

  int num_stages() const { return isize(stages); }
  /// Eq 2.2 with the pipeline's actual microbatch count: T1 + (N_b - S + k* - 1) t_k* + T3,
  /// and never below T1 (one microbatch through every stage).
  double iteration_time_s(int microbatches) const;
  /// Stage holding `layer`, and the GPUs it uses.
  const TemplateStage& stage_of_layer(int layer) const;
};

/// n_0: the fewest nodes whose GPUs can hold the model (memory only, before mapping).
int minimal_nodes(const PlanningProblem& problem);

/// Node specification (§2.4.1.1, App. A.1): n_0 minimal by memory (the first size whose
/// stage mapping fits), then templates of consecutive sizes n_0 .. min(N - f n_0, L) (a
/// stage holds >= 1 layer on one node), each with its stage mapping.
/// Throws InfeasibleError when N < (f+1) n_0 or a single layer does not fit one node.
PerTemplate<PipelineTemplate> generate_templates(const PlanningProblem& problem);

/// The divide-and-conquer stage mapping of Eq 2.1-2.4 (memoised) for one template of
/// `nodes` nodes: iterates S over n .. min(L, n M), every stage inside one node.
/// Throws InfeasibleError when no mapping fits GPU memory.
PipelineTemplate map_stages(const PlanningProblem& problem, int nodes);

// ---------------------------------------------------------------------------------------
// Instantiation and batch distribution

/// One instantiated pipeline: a template and the concrete nodes (ids) it runs on, in
/// pipeline order (stage node k runs on nodes[k]).
struct Pipeline {
  TemplateId template_index;  ///< into the templates table
  PerPipelineNode<int> nodes;
  int microbatches = 0;  ///< N_{b,i} after batch distribution
};

struct Instantiation {
  std::vector<Pipeline> pipelines;
  /// x_j: pipelines per template (Eq 2.5's X).
  PerTemplate<int> counts;
  int global_batch = 0;         ///< B actually distributed (samples)
  double iteration_time_s = 0;  ///< slowest pipeline + layer-granular gradient sync
  double sync_time_s = 0;       ///< the gradient-sync part
  /// How X was chosen: "exact" (the branch and bound over every X), or, for node counts
  /// past its limits, "two template sizes (...)": the best X with at most two distinct
  /// template sizes (not guaranteed optimal).
  std::string search = "exact";
  double throughput_samples_per_s() const {
    return iteration_time_s > 0 ? global_batch / iteration_time_s : 0;
  }
  int num_nodes() const;
};

/// Eq 2.5: every X with sum x_j n_j = |nodes| (all nodes used) and sum x_j >= f + 1,
/// in a deterministic order.
std::vector<PerTemplate<int>> feasible_counts(const PerTemplate<PipelineTemplate>& templates,
                                              int nodes, int fault_tolerance);

/// The most nodes instantiate() plans for: its search recurses once per pipeline, and
/// beyond this the number of template combinations is far past what it can search.
constexpr int kMaxInstantiationNodes = 10'000;

/// Chooses the X of Eq 2.5 with the highest throughput after batch distribution and
/// assigns `nodes` (ids, in the given order) to its pipelines, larger templates first.
/// Exact: a branch and bound (a lower bound from Eq 2.6's continuous relaxation prunes
/// X without distributing the batch) returns the exhaustive search's X, ties going to the
/// first X in feasible_counts' order; it stores no list of all X, so 55 nodes with
/// n_0 = 1 (~450,000 X) plan in well under a second.
/// Throws InfeasibleError "N' nodes are fewer than (f+1) n_0 = ..." when |nodes| <
/// (f+1) n_0, and naming the limit when |nodes| > kMaxInstantiationNodes or the search
/// takes too many steps; InputError if the batch is not distributable (with the
/// recommendation).
Instantiation instantiate(const PlanningProblem& problem,
                          const PerTemplate<PipelineTemplate>& templates,
                          const std::vector<int>& nodes);

/// The reference: feasible_counts (every X stored, at most 2,000,000 lists) and Eq 2.6
/// for each. Same result as instantiate; for tests and small instances only.
Instantiation instantiate_exhaustive(const PlanningProblem& problem,
                                     const PerTemplate<PipelineTemplate>& templates,
                                     const std::vector<int>& nodes);

/// The search behind instantiate: the best X for `nodes` nodes, batch distributed,
/// pipelines without node ids. Throws like instantiate (except the too-few-nodes check).
Instantiation best_instantiation(const PlanningProblem& problem,
                                 const PerTemplate<PipelineTemplate>& templates, int nodes);

struct BatchDistribution {
  bool distributable = false;
  std::vector<int> microbatches;     ///< N_{b,i} per pipeline (sums to B / b)
  double variance = 0;               ///< of the pipelines' times (objective of Eq 2.6)
  int recommended_global_batch = 0;  ///< nearest distributable B when !distributable
};

/// Eq 2.6 for pipelines with these templates: integer N_{b,i} >= 1 with sum N_{b,i} b = B
/// minimising the variance of the pipeline times iteration_time_s(N_{b,i}). Exact
/// (exhaustive) when the search space is small, otherwise balanced rounding plus pairwise
/// exchanges. When B is not a multiple of b or B / b < number of pipelines, returns
/// !distributable with the nearest distributable B (ties: the larger).
BatchDistribution distribute_batch(const std::vector<const PipelineTemplate*>& pipelines,
                                   int global_batch, int microbatch_size);

/// Convenience: distribute over an instantiation's pipelines, filling microbatches and the
/// iteration time. Throws InputError with the recommendation when not distributable.
void distribute_batch(const PlanningProblem& problem,
                      const PerTemplate<PipelineTemplate>& templates, Instantiation& inst);

// ---------------------------------------------------------------------------------------
// Gradient synchronisation between heterogeneous pipelines (§2.6.1)

/// One layer's all-reduce group: the node (id) of each pipeline that holds the layer.
struct LayerSyncGroup {
  int layer = 0;
  std::vector<int> nodes;
  double time_s = 0;  ///< ring of |nodes| members on the inter-node fabric
};

/// Per-layer groups and the sync time: each node's NIC carries the rings of the layers it
/// holds one after another, so the sync takes the busiest node's sum.
std::vector<LayerSyncGroup> gradient_sync_groups(const PlanningProblem& problem,
                                                 const PerTemplate<PipelineTemplate>& templates,
                                                 const Instantiation& inst);
double gradient_sync_time_s(const PlanningProblem& problem,
                            const PerTemplate<PipelineTemplate>& templates,
                            const Instantiation& inst);
/// One pipeline of template `t`: its busiest node's sum of two-member across-node
/// all-reduce times over the layers the node holds.
double busiest_node_sync_s(const PlanningProblem& problem, const PipelineTemplate& t);

/// Slowest pipeline's iteration_time_s(N_b) + gradient sync (fills the two fields).
void evaluate(const PlanningProblem& problem, const PerTemplate<PipelineTemplate>& templates,
              Instantiation& inst);

// ---------------------------------------------------------------------------------------
// Reinstantiation (§2.5.1, Fig 2.8, App. A.2)

enum class ReconfigurationCase {
  kNone,      ///< no pipeline affected
  kSimple,    ///< every affected pipeline fits a smaller template (Fig 2.8a)
  kBorrow,    ///< nodes were borrowed from pipelines that can yield them (Fig 2.8b)
  kMerge,     ///< pipelines were merged (Fig 2.8c)
  kAddNodes,  ///< only nodes were added
  kFull,      ///< fell back to a fresh Eq 2.5 instantiation of all nodes
};
const char* to_string(ReconfigurationCase c);

/// Model state one node must fetch: `layer` from surviving replica `from_node`.
struct LayerCopy {
  int layer = 0;
  int from_node = 0;
  int to_node = 0;
  double bytes = 0;
};

struct Reinstantiation {
  Instantiation next;
  ReconfigurationCase kind = ReconfigurationCase::kNone;
  std::vector<LayerCopy> copies;
  std::vector<std::string> actions;  ///< human-readable steps ("pipeline 2: 4 -> 3 nodes")
};

/// Removes `lost` node ids, then per affected pipeline: simple reinstantiation with the
/// template of its remaining node count; else borrow nodes from pipelines above n_0; else
/// merge with the smallest other pipeline (App. A.2 guarantees a template). `added` node
/// ids join pipelines that can grow (smallest first) or form new pipelines. Batch is then
/// redistributed (§2.5.2) and the layer copies computed: every layer a node must now hold
/// and did not hold before, from a surviving holder (the least-loaded one, then the lowest
/// id). Ids in `lost` that `current` does not use are ignored. Throws InfeasibleError
/// when fewer than (f+1) n_0 nodes remain (same message as
/// instantiate) or a layer has no surviving replica.
Reinstantiation reinstantiate(const PlanningProblem& problem,
                              const PerTemplate<PipelineTemplate>& templates,
                              const Instantiation& current, const std::vector<int>& lost,
                              const std::vector<int>& added);

/// Time to perform `copies` when every node has one NIC of `bandwidth_bytes_per_s` per
/// direction: the busiest node's max(sent, received) bytes / bandwidth + latency.
double copy_time_s(const std::vector<LayerCopy>& copies, double bandwidth_bytes_per_s,
                   double latency_s);

/// The message for too few nodes: "N' = 3 nodes are fewer than (f+1) n_0 = 4 ..."
std::string too_few_nodes_message(int nodes, int fault_tolerance, int n0);

}  // namespace loom::oobleck
