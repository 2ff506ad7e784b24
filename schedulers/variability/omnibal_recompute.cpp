// OmniBal §4.3, balanced adaptive recomputation (reconstructed: appendix A.1.1 is
// missing). After data and model balance each stage's memory need is stable, so a stage
// recomputes only as many layers as its free memory demands instead of the most
// aggressive setting everywhere. Per-layer choice, most bytes saved per recompute second
// first: the layer then keeps only its input (s x h, as core/cost_recompute.hpp) and its
// backward (B, or I when split) re-runs its forward.
#include <algorithm>
#include <map>

#include "core/errors.hpp"
#include "core/timeline.hpp"
#include "schedulers/variability/omnibal.hpp"

namespace loom {
namespace {

struct LayerEffect {
  double saved_bytes = 0;  ///< activation bytes no longer kept
  double forward_s = 0;    ///< recompute time added to the backward
};

/// The effect of recomputing `layer` for microbatch `mb` of `replica` on a stage of `tp`.
LayerEffect effect(const Schedule& schedule, const SchedulingProblem& problem, ReplicaId replica,
                   MicrobatchId mb, int layer, int tp) {
  const Model& model = *problem.model;
  const std::vector<const Sample*> batch =
      sample_batch(problem.samples, schedule.samples_of(replica, mb));
  const MicrobatchShape shape = layer_shape(model, layer, batch);
  const double kept = problem.cost->activation_bytes(layer, shape, tp);
  // The layer's input is the previous layer's output where that layer is of its own module.
  const double input = layer > 0 && model.module_of(layer - 1) == model.module_of(layer)
                           ? problem.cost->output_bytes(layer - 1, shape)
                           : problem.cost->output_bytes(layer, shape);
  return {std::max(0.0, kept - input),
          effective_cost(*problem.cost, model, layer, shape, tp).forward_s};
}

/// Applies recomputation of `layer` (on stage `stage`) to every replica's ops.
void apply(Schedule& schedule, const SchedulingProblem& problem, StageId stage, int layer) {
  for (const RankId r : schedule.rank_ids()) {
    const RankInfo& info = schedule.ranks[r];
    for (Op& op : schedule.programs[r]) {
      auto* c = std::get_if<Compute>(&op);
      // A layer split around its context-parallel exchange keeps its activations, and
      // recomputes, on its last part; a CP rank's share is 1/cp of the replica's.
      if (!c || c->redundant || c->continues || c->stage != stage || layer < c->first_layer ||
          layer >= c->end_layer)
        continue;
      const LayerEffect e = effect(schedule, problem, info.replica, c->microbatch, layer, info.tp);
      const double share = 1.0 / schedule.cp;
      if (c->pass == Pass::kF)
        c->activation_bytes = std::max(0.0, c->activation_bytes - e.saved_bytes * share);
      if (c->pass == Pass::kB || c->pass == Pass::kI) c->seconds += e.forward_s * share;
    }
  }
}

}  // namespace

std::vector<int> adaptive_recompute(Schedule& schedule, const SchedulingProblem& problem,
                                    double memory_bytes) {
  const Model& model = *problem.model;
  PerStage<int> recomputed(schedule.num_stages, 0);
  auto over = [&](StageId stage) {
    const auto peaks = activation_peaks(schedule);
    for (const RankId r : schedule.rank_ids()) {
      const bool on_stage = std::any_of(schedule.programs[r].begin(), schedule.programs[r].end(),
                                        [&](const Op& op) { return op_stage(op) == stage; });
      if (on_stage && schedule.static_memory[r].total() + peaks[r].bytes > memory_bytes)
        return true;
    }
    return false;
  };
  for (const StageId s : IdRange<StageId>(schedule.num_stages)) {
    if (!over(s)) continue;
    // Candidate layers of the stage that keep activations, from replica 0's first
    // microbatch op that covers them, most bytes saved per second first.
    std::map<int, LayerEffect> cand;
    for (const RankId r : schedule.rank_ids()) {
      for (const Op& op : schedule.programs[r]) {
        const auto* c = std::get_if<Compute>(&op);
        if (!c || c->pass != Pass::kF || c->stage != s || c->activation_bytes <= 0) continue;
        for (int l = c->first_layer; l < c->end_layer; ++l) {
          if (!cand.count(l) && model.has_trainable_upstream(l))
            cand[l] = effect(schedule, problem, schedule.ranks[r].replica, c->microbatch, l,
                             schedule.ranks[r].tp);
        }
      }
    }
    std::vector<std::pair<int, LayerEffect>> order(cand.begin(), cand.end());
    std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
      return a.second.saved_bytes / std::max(a.second.forward_s, 1e-12) >
             b.second.saved_bytes / std::max(b.second.forward_s, 1e-12);
    });
    for (const auto& [layer, e] : order) {
      if (!over(s)) break;
      apply(schedule, problem, s, layer);
      ++recomputed[s];
    }
    if (over(s))
      throw InfeasibleError("omnibal: stage " + to_string(s) +
                            " does not fit GPU memory even with every layer recomputed");
  }
  return {recomputed.begin(), recomputed.end()};
}

}  // namespace loom
