#pragma once
/// DistTrain-like scheduling (baseline-schedules.md §4; dissertation §4.2.1 Fig 4.2b) and
/// the per-sample workload view shared by the data-variability baselines (disttrain, dip,
/// omnibal).
#include <vector>

#include "schedulers/multimodal/multimodal.hpp"

namespace loom {

/// One sample's compute under the problem's cost model (frozen status applied, Eq 3.2):
/// F + B seconds of its encoder-side layers (encoders and projectors) and of the LLM part,
/// as if the sample were a microbatch of its own on a stage of parallel.tp GPUs.
struct ModalityWork {
  double encoder_s = 0;
  double llm_s = 0;
  double total() const { return encoder_s + llm_s; }
};
PerSample<ModalityWork> sample_work(const SchedulingProblem& problem, const Branches& branches);

/// Intra-microbatch reordering [2nd]: the samples of global microbatch j (positions
/// j*dp*mbs .. in arrival order) are spread over the dp replicas by LPT on encoder work,
/// mbs samples each (the equal-cardinality variant). Returns assignment[replica][j].
SampleAssignment intra_microbatch_lpt(const PerSample<ModalityWork>& work, int dp, int microbatches,
                                      int microbatch_size);

/// Inter-microbatch reordering [2nd] of one replica's microbatches (their encoder and LLM
/// stage times): the smallest first, the `tail` next smallest reserved for the cool-down,
/// the middle by best fit of the next encoder stage time against the backbone period of
/// the microbatch before it. Returns the microbatches in execution order.
std::vector<int> inter_microbatch_order(const std::vector<double>& encoder_stage_s,
                                        const std::vector<double>& llm_stage_s, int tail);

/// The disttrain schedule; `reorder = false` keeps the arrival order (the ablation the
/// tests compare against).
Schedule disttrain_schedule(const SchedulingProblem& problem, bool reorder);

}  // namespace loom
