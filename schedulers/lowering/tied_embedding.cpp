#include "schedulers/lowering/tied_embedding.hpp"

#include <algorithm>

namespace loom::lowering {
namespace {

/// The stage whose segments own `layer`; -1 when none does.
int stage_owning(const PipelinePrograms& programs, int layer) {
  for (size_t s = 0; s < programs.stages.size(); ++s) {
    for (const Segment& seg : programs.stages[s].segments) {
      if (layer >= seg.first && layer < seg.end) return static_cast<int>(s);
    }
  }
  return -1;
}

/// Whether a stage on rank r holds a successor copy (Bamboo) of `layer`.
bool holds_successor_copy(const PipelinePrograms& programs, PipelineRank r, int layer) {
  for (size_t s = 0; s < programs.stages.size(); ++s) {
    if (!programs.holds(r, static_cast<int>(s))) continue;
    for (const Segment& seg : programs.stages[s].successor_copy) {
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
  for (int m = 0; m < static_cast<int>(model.modules().size()); ++m) {
    int first = -1, last = -1;  // the module's first and last global layers
    for (int l = 0; l < model.num_layers(); ++l) {
      if (model.layers()[static_cast<size_t>(l)].module != m) continue;
      if (first < 0) first = l;
      last = l;
    }
    if (first < 0) continue;
    TiedEmbedding e{.module = m,
                    .first_layer = first,
                    .parameters = problem.cost->embedding_parameters(first),
                    .first_stage = stage_owning(programs, first),
                    .last_stage = stage_owning(programs, last),
                    .trained = !model.layer(first).frozen};
    if (e.parameters <= 0 || e.first_stage < 0 || e.last_stage < 0) continue;
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
