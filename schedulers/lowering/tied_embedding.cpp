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
    for (int r = 0; r < programs.ranks; ++r) {
      const bool head = programs.holds(r, e.last_stage);
      const bool embedding = programs.holds(r, e.first_stage);
      if (head && !embedding) e.copy_ranks.push_back(r);
      if (head || embedding) e.group.push_back(r);
    }
    if (e.copy_ranks.empty()) continue;
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace loom::lowering
