#include "schedulers/multimodal/fused_encoders.hpp"

#include <algorithm>
#include <limits>

#include "core/index.hpp"
#include "schedulers/lowering/stage_graph.hpp"

namespace loom {
namespace {

/// The forward + backward seconds of every encoder branch, whole: what stage 0 carries
/// ahead of the LLM when the encoders sit on the LLM's first stage.
double encoders_s(const Branches& branches, const std::vector<double>& costs) {
  double sum = 0;
  for (const std::vector<int>& branch : branches.encoders)
    for (const int l : branch) sum += costs[static_cast<size_t>(l)];
  return sum;
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

}  // namespace

StageGraph fused_encoder_graph(const Model& model, const Branches& branches,
                               const std::vector<double>& costs, int p, int e,
                               const std::string& encoder_stages_key) {
  StageGraph graph(p);
  for (size_t b = 0; b < branches.encoders.size(); ++b) {
    // E = 0: the branch whole on stage 0, ahead of the LLM's first piece.
    const auto pieces =
        e == 0 ? std::vector<std::vector<Segment>>{segments_of(model, branches.encoders[b])}
               : partition_branch(model, branches.encoders[b], costs, e,
                                  encoder_stages_key + " (encoder '" + branches.names[b] + "')");
    for (StageId k{0}; const std::vector<Segment>& piece : pieces) {  // stages 0 .. e-1
      auto& segs = graph[k].segments;
      segs.insert(segs.end(), piece.begin(), piece.end());
      ++k;
    }
  }
  const double head_s = e == 0 ? encoders_s(branches, costs) : 0;
  const auto llm = partition_branch(model, branches.llm, costs, p - e, "LLM stages", head_s);
  for (StageId k{e}; const std::vector<Segment>& piece : llm) {  // stages e .. p-1
    auto& segs = graph[k].segments;
    segs.insert(segs.end(), piece.begin(), piece.end());
    ++k;
  }
  return graph;
}

std::optional<int> balanced_encoder_stages(const Model& model, const Branches& branches,
                                           const std::vector<double>& costs, int p) {
  int shortest = isize(branches.encoders.front());
  for (const auto& b : branches.encoders) shortest = std::min(shortest, isize(b));
  double best = std::numeric_limits<double>::infinity();
  std::optional<int> chosen;
  for (int e = 1; e < p; ++e) {
    if (e > shortest || p - e > isize(branches.llm)) continue;
    const double t = std::max(fused_bottleneck(model, branches, costs, e),
                              branch_bottleneck(branches.llm, costs, p - e));
    if (!chosen || t < best - 1e-9 * best) {
      best = t;
      chosen = e;
    }
  }
  return chosen;
}

}  // namespace loom
