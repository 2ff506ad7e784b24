#include "schedulers/lowering/tied_embedding.hpp"

#include <algorithm>

#include "core/index.hpp"
#include "schedulers/lowering/module_shards.hpp"

namespace loom::lowering {
namespace {

/// The stage whose segments own `layer`, if one does.
std::optional<StageId> stage_owning(const PipelinePrograms& programs, int layer) {
  for (const StageId s : programs.stages.ids()) {
    for (const Segment& seg : programs.stages[s].segments) {
      if (layer >= seg.first && layer < seg.end) return s;
    }
  }
  return std::nullopt;
}

/// Whether a stage on rank r holds a successor copy (Bamboo) of `layer`.
bool holds_successor_copy(const PipelinePrograms& programs, PipelineRank r, int layer) {
  for (const StageId s : programs.stages.ids()) {
    if (!programs.holds(r, s)) continue;
    for (const Segment& seg : programs.stages[s].forward_copies.successor) {
      if (layer >= seg.first && layer < seg.end) return true;
    }
  }
  return false;
}

}  // namespace

std::vector<TiedEmbedding> tied_embeddings(const SchedulingProblem& problem,
                                           const PipelinePrograms& programs) {
  const Model& model = *problem.model;
  std::vector<TiedEmbedding> out;
  for (const ModuleId m : model.modules().ids()) {
    if (!model.module(m).tie_embeddings) continue;            // the head has weights of its own
    const std::vector<int> layers = module_layers(model, m);  // a module has at least one
    const int first = layers.front(), last = layers.back();
    const std::optional<StageId> first_stage = stage_owning(programs, first),
                                 last_stage = stage_owning(programs, last);
    if (!first_stage || !last_stage) continue;
    TiedEmbedding e{.module = m,
                    .first_layer = first,
                    .parameters = problem.cost->embedding_parameters(first),
                    .first_stage = *first_stage,
                    .last_stage = *last_stage,
                    .trained = !model.layer(first).frozen};
    if (e.parameters <= 0) continue;
    bool split = false;  // some rank runs the head without the embedding's own stage
    for (const PipelineRank r : programs.rank_ids()) {
      const bool head = programs.holds(r, e.last_stage);
      const bool embedding = programs.holds(r, e.first_stage);
      split = split || (head && !embedding);
      // Bamboo's last stage holds stage 0's whole model state as its successor copy: the
      // embedding is already there, so it keeps no second copy (it still reduces).
      if (head && !embedding && !holds_successor_copy(programs, r, first))
        e.copy_ranks.push_back(r);
      if (head || embedding) e.group.push_back(r);
    }
    if (!split) continue;
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace loom::lowering
