// Encoders-colocated pipeline parallelism (Megatron-LM's VLM pipeline; cornstarch-arxiv
// §2.2, Fig 1c and 2b; the "encoders being colocated" rows of dissertation Table 3.2):
// every encoder branch is cut into the same number E of stages and stage k runs piece k of
// every encoder one after the other, fused into one chain ahead of the LLM's p - E stages.
// The chain is what creates the false dependency: the audio piece waits for the vision
// piece on the same GPU although the two encoders are independent.
//
//   stage 0:  vision[0..a) audio[0..c)          (sequential on one rank)
//   stage 1:  vision[a..) vproj audio[c..) aproj
//   stage 2+: llm pieces
//
// Each branch and the LLM are partitioned by Eq 3.5 with the configured cost view
// (`naive` = Megatron's "backward = 2 x forward", `true` = frozen-aware). E is
// `schedule.encoder_stages`, or (0, the default) the E in 1..p-1 with the least iteration
// time the planner predicts under that same view (reconstructed: the paper tuned E by
// hand per model, cornstarch-arxiv §6.1 "manually craft parallelization policies").
#include <limits>

#include "core/errors.hpp"
#include "schedulers/multimodal.hpp"

namespace loom {
namespace {

StageGraph colocated_graph(const Model& model, const Branches& branches,
                           const std::vector<double>& costs, int p, int e) {
  StageGraph graph(static_cast<size_t>(p));
  for (size_t b = 0; b < branches.encoders.size(); ++b) {
    const auto pieces =
        partition_branch(model, branches.encoders[b], costs, e,
                         "schedule.encoder_stages (encoder '" + branches.names[b] + "')");
    for (int k = 0; k < e; ++k) {
      auto& segs = graph[static_cast<size_t>(k)].segments;
      segs.insert(segs.end(), pieces[static_cast<size_t>(k)].begin(),
                  pieces[static_cast<size_t>(k)].end());
    }
  }
  const auto llm = partition_branch(model, branches.llm, costs, p - e, "LLM stages");
  for (int k = e; k < p; ++k)
    graph[static_cast<size_t>(k)].segments = llm[static_cast<size_t>(k - e)];
  return graph;
}

}  // namespace

Schedule generate_encoders_colocated(const SchedulingProblem& problem) {
  const char* name = "encoders-colocated";
  if (!problem.parallel.module_layouts.empty())
    throw InputError(std::string("parallel.modules: '") + name +
                     "' runs the single layout parallel.pp/dp/tp");
  const Model& model = *problem.model;
  const Branches branches = split_branches(model, name);
  const int p = problem.parallel.pp;
  if (p < 2)
    throw InputError(std::string("parallel.pp: '") + name +
                     "' needs at least 2 stages (encoders, then the LLM)");
  const std::vector<double> costs = view_costs(problem);
  int e = problem.schedule.encoder_stages;
  if (e >= p)
    throw InputError("schedule.encoder_stages: " + std::to_string(e) +
                     " leaves no stage for the LLM (parallel.pp = " + std::to_string(p) + ")");
  if (e == 0) {
    size_t shortest = branches.encoders.front().size();
    for (const auto& b : branches.encoders) shortest = std::min(shortest, b.size());
    double best = std::numeric_limits<double>::infinity();
    for (int cand = 1; cand < p; ++cand) {
      if (cand > static_cast<int>(shortest) || p - cand > static_cast<int>(branches.llm.size()))
        continue;
      const double t =
          predicted_iteration_s(problem, colocated_graph(model, branches, costs, p, cand));
      if (t < best) {
        best = t;
        e = cand;
      }
    }
    if (e == 0)
      throw InputError("parallel.pp: " + std::to_string(p) +
                       " stages cannot hold the encoders and the LLM (too few layers)");
  }
  return lower_multimodal(problem, name, colocated_graph(model, branches, costs, p, e));
}

}  // namespace loom
