// Encoders-replicated pipeline parallelism (Meta's multimodal Llama; cornstarch-arxiv §2.2,
// Fig 1b and 2a): the LLM is partitioned into p stages like an LLM alone (Eq 3.5 over the
// LLM's layers), and every stage runs every encoder (and projector) itself, so stages stay
// balanced but encoder work is done p times.
//
//   stage 0: [vision audio] llm[0..a)       <- the copy whose output feeds the LLM
//   stage 1: [vision audio](copy) llm[a..b) <- redundant copies, forward only
//   stage 2: [vision audio](copy) llm[b..)
//
// Reconstructed: in Llama 3 the copies feed cross-attention layers on every stage; Loom's
// model graph feeds projected tokens into the LLM's first layer, so only stage 0's copy
// has a consumer (and a backward); the others are Compute::redundant forward-only ops
// that cost time and hold their weights (parameters, no gradients).
#include "schedulers/multimodal/multimodal.hpp"

namespace loom {

Schedule generate_encoders_replicated(const SchedulingProblem& problem) {
  const char* name = "encoders-replicated";
  require_single_layout(problem, name);
  const Model& model = *problem.model;
  const Branches branches = split_branches(model, name);
  const int p = problem.parallel.pp;
  const std::vector<double> costs = view_costs(problem);
  const auto llm = partition_branch(model, branches.llm, costs, p, "parallel.pp (LLM stages)");

  // Every branch's layers as segments, in model order (vision, its projector, audio, ...).
  std::vector<int> encoder_layers;
  for (const auto& b : branches.encoders)
    encoder_layers.insert(encoder_layers.end(), b.begin(), b.end());
  std::sort(encoder_layers.begin(), encoder_layers.end());
  const std::vector<Segment> encoders =
      partition_branch(model, encoder_layers, costs, 1, "encoders").front();

  StageGraph graph(p);
  for (const StageId s : graph.ids()) {
    StageSpec& stage = graph[s];
    if (s == StageId{0})
      stage.segments = encoders;
    else
      stage.forward_copies.before = encoders;
    const auto& piece = llm[s.slot()];
    stage.segments.insert(stage.segments.end(), piece.begin(), piece.end());
  }
  return lower_multimodal(problem, name, graph);
}

}  // namespace loom
