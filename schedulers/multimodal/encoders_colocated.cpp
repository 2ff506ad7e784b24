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
// `[schedule.encoders-colocated] encoder_stages`, or (0, the default) the E in 1..p-1 that
// minimizes the slowest stage over the whole fused chain, Eq 3.5's objective (reconstructed: the
// paper does not say how E was picked; this is the balance the dissertation's partitioner aims for,
// §3.4.1, and under `naive` it balances forward time, §3.5.3).
#include <algorithm>
#include <limits>

#include "core/errors.hpp"
#include "core/index.hpp"
#include "schedulers/multimodal/multimodal.hpp"

namespace loom {
namespace {

StageGraph colocated_graph(const Model& model, const Branches& branches,
                           const std::vector<double>& costs, int p, int e) {
  StageGraph graph(p);
  for (size_t b = 0; b < branches.encoders.size(); ++b) {
    const auto pieces = partition_branch(model, branches.encoders[b], costs, e,
                                         "encoder_stages (encoder '" + branches.names[b] + "')");
    for (StageId k{0}; const std::vector<Segment>& piece : pieces) {  // stages 0 .. e-1
      auto& segs = graph[k].segments;
      segs.insert(segs.end(), piece.begin(), piece.end());
      ++k;
    }
  }
  const auto llm = partition_branch(model, branches.llm, costs, p - e, "LLM stages");
  for (StageId k{e}; const std::vector<Segment>& piece : llm) {  // stages e .. p-1
    graph[k].segments = piece;
    ++k;
  }
  return graph;
}

/// The largest per-stage cost T of the fused stages: piece k of every branch.
double fused_bottleneck(const Model& model, const Branches& branches,
                        const std::vector<double>& costs, int e) {
  PerStage<double> stage(e, 0.0);
  for (const std::vector<int>& branch : branches.encoders) {
    const auto pieces = partition_branch(model, branch, costs, e, "encoders");
    for (StageId k{0}; const std::vector<Segment>& piece : pieces) {  // stages 0 .. e-1
      for (const Segment& seg : piece) {
        for (const double cost : layer_slice(costs, seg.first, seg.end)) stage[k] += cost;
      }
      ++k;
    }
  }
  return *std::max_element(stage.begin(), stage.end());
}

/// Eq 3.5's objective over the fused chain: the E whose slowest stage, encoder or LLM,
/// is fastest under the view (ties: fewer encoder stages). Under `naive` that balances
/// forward time, as the frozen-unaware partitioner of dissertation §3.5.3 does.
int balanced_encoder_stages(const Model& model, const Branches& branches,
                            const std::vector<double>& costs, int p) {
  int shortest = isize(branches.encoders.front());
  for (const auto& b : branches.encoders) shortest = std::min(shortest, isize(b));
  double best = std::numeric_limits<double>::infinity();
  int chosen = 0;
  for (int e = 1; e < p; ++e) {
    if (e > shortest || p - e > isize(branches.llm)) continue;
    const double t = std::max(fused_bottleneck(model, branches, costs, e),
                              branch_bottleneck(branches.llm, costs, p - e));
    if (chosen == 0 || t < best - 1e-9 * best) {
      best = t;
      chosen = e;
    }
  }
  if (chosen == 0)
    throw InputError("parallel.pp: " + std::to_string(p) +
                     " stages cannot hold the encoders and the LLM (too few layers)");
  return chosen;
}

}  // namespace

StageGraph encoders_colocated_graph(const SchedulingProblem& problem, const Branches& branches,
                                    const std::vector<double>& costs, const char* scheduler_name,
                                    int encoder_stages) {
  const int p = problem.parallel.pp;
  if (p < 2)
    throw InputError(std::string("parallel.pp: '") + scheduler_name +
                     "' needs at least 2 stages (encoders, then the LLM)");
  int e = encoder_stages;
  if (e >= p)
    throw InputError("schedule." + std::string(scheduler_name) +
                     ".encoder_stages: " + std::to_string(e) +
                     " leaves no stage for the LLM (parallel.pp = " + std::to_string(p) + ")");
  if (e == 0) e = balanced_encoder_stages(*problem.model, branches, costs, p);
  return colocated_graph(*problem.model, branches, costs, p, e);
}

const OptionSet<EncoderStagesOptions>& encoder_stages_options() {
  static const OptionSet<EncoderStagesOptions> kOptions{
      {"encoder_stages", &EncoderStagesOptions::encoder_stages,
       "pipeline stages of the fused encoders, E in 1..pp-1; 0 = the E whose slowest stage "
       "is fastest (Eq 3.5's balance)",
       at_least(0)},
  };
  return kOptions;
}

std::vector<OptionSpec> encoders_colocated_options() {
  return encoder_stages_options().specs();
}

Schedule generate_encoders_colocated(const SchedulingProblem& problem) {
  const char* name = "encoders-colocated";
  require_single_layout(problem, name);
  const Branches branches = split_branches(*problem.model, name);
  const std::vector<double> costs = view_costs(problem);
  const int e = encoder_stages_options().read(problem.schedule, name).encoder_stages;
  return lower_multimodal(problem, name,
                          encoders_colocated_graph(problem, branches, costs, name, e));
}

}  // namespace loom
