#pragma once
/// The `entrain` scheduler (dissertation ch. 4 §4.5): disaggregated encoder / LLM stages
/// (the encoders fused on E stages, the LLM on pp - E, Table 4.1's E.PP / L.PP), the
/// hierarchical microbatch assignment of Algorithm 4 (schedulers/variability/entrain_assign.hpp)
/// and the pipeline changes of §4.5.3:
///   - encoder microbatch j runs M^enc_j; the LLM's microbatch j runs M^LLM_j (deferred
///     samples of an overloaded j move to the underloaded j + 1 that follows it)
///   - split backward: the encoder backward of a deferred sample runs after that sample's
///     LLM backward (with M^LLM_{j+1}), the rest of M^enc_j right after the LLM backward of j
///   - eager forward: every stage warms up with as many forwards as memory allows
///   - `[schedule.entrain] pipeline = "zb"` splits each backward into I and W (zero-bubble
///     H1-style: stage s runs s I before its first W); "1f1b" (default) keeps B fused.
///
/// In the IR, microbatch j of a Compute is the LLM microbatch M^LLM_j for every backward
/// and every LLM op, and M^enc_j for the encoders' forwards (Schedule::samples lists the
/// M^LLM). So an encoder B of j covers (M^enc_j minus its deferred samples) plus the
/// samples deferred from j - 1, which is exactly the split backward; its activations are
/// charged from the forward of j on (deferred ones: one forward interval late).
#include <optional>
#include <string>
#include <vector>

#include "schedulers/lowering/lowering.hpp"
#include "schedulers/variability/entrain_assign.hpp"

namespace loom {

/// entrain's options (`[schedule.entrain]`).
struct EntrainOptions {
  std::optional<int> encoder_stages;  ///< E (0: on the LLM's first stage); nullopt = balanced
  std::string pipeline = "1f1b";      ///< "1f1b" (fused B) or "zb" (split I/W)
  bool defer = true;                  ///< pairwise deferral (false: stratified assignment only)
  bool eager = true;                  ///< eager forward: warm-ups as long as memory allows
};
const OptionSet<EntrainOptions>& entrain_options();

struct EntrainPlan {
  int encoder_stages = 0;        ///< E (the encoder_stages option, or the balanced split)
  StageGraph graph;              ///< E fused encoder stages, then the LLM's
  PerSample<SampleWork> work;    ///< per sample of the global batch, via the cost model
  EntrainAssignment assignment;  ///< Algorithm 4 per replica
  std::vector<int> warmup;       ///< forwards before the first backward, per stage
};

/// Per-sample workloads (F + B, frozen status applied) of the unified encoder and of the
/// LLM through the cost model (core/workload_cost.hpp), on a stage of parallel.tp GPUs.
PerSample<SampleWork> entrain_sample_work(const SchedulingProblem& problem);

/// Everything but the lowering. K_eff is Algorithm 4's, floored at parallel.pp, and raised
/// towards K while plain 1F1B (no eager warm-up) would not fit in GPU memory. Throws
/// InputError on a model without encoder or LLM, too few stages or samples.
EntrainPlan plan_entrain(const SchedulingProblem& problem);

/// Per-stage action order: 1F1B with the given warm-ups; with `zero_bubble`, each B
/// becomes I and its W trails by lag[s] microbatches (drained at the end).
StageOrders entrain_orders(const std::vector<int>& warmup, const std::vector<int>& w_lag,
                           int microbatches, bool zero_bubble);

Schedule generate_entrain(const SchedulingProblem& problem);

}  // namespace loom
