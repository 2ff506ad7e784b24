#include "schedulers/hetero/hetero_order.hpp"

#include <algorithm>
#include <functional>
#include <optional>
#include <stdexcept>

#include "core/index.hpp"

namespace loom {

namespace {
/// A module group's node in the stage graph: an index into the caller's groups.
using GroupNode = Id<struct GroupNodeTag>;
}  // namespace

std::vector<std::vector<int>> stages_to_sink(const std::vector<StageGraphGroup>& groups) {
  // Distance of a group's first stage to the sink, memoized over the (acyclic) group graph.
  IdVector<GroupNode, std::optional<int>> first(isize(groups));
  IdVector<GroupNode, bool> visiting(isize(groups), false);
  std::function<int(GroupNode)> from_first = [&](GroupNode g) {
    if (first[g]) return *first[g];
    if (visiting[g]) throw std::logic_error("stage graph has a cycle");
    visiting[g] = true;
    const StageGraphGroup& group = groups[g.slot()];
    int below = 0;  // the sink's last stage has nothing downstream
    for (int v : group.consumers) below = std::max(below, 1 + from_first(GroupNode{v}));
    visiting[g] = false;
    first[g] = group.pp - 1 + below;
    return *first[g];
  };
  std::vector<std::vector<int>> out;
  for (const GroupNode g : first.ids()) {
    const int d0 = from_first(g);
    std::vector<int>& distance = out.emplace_back();
    for (int p = 0; p < groups[g.slot()].pp; ++p) distance.push_back(d0 - p);
  }
  return out;
}

std::vector<StageAction> one_f_one_b_order(int downstream, int microbatches) {
  return one_f_one_b_orders({downstream}, microbatches).front();
}

std::vector<StageOrders> graph_aware_1f1b(const std::vector<StageGraphGroup>& groups,
                                          int microbatches) {
  const auto distance = stages_to_sink(groups);
  std::vector<StageOrders> orders(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    for (int d : distance[g]) orders[g].push_back(one_f_one_b_order(d, microbatches));
  }
  return orders;
}

std::vector<PhaseStep> three_phase_order(const std::vector<int>& encoders, int llm,
                                         const std::vector<StageAction>& llm_order,
                                         int microbatches) {
  std::vector<PhaseStep> steps;
  for (int e : encoders) {
    for (const MicrobatchId j : IdRange<MicrobatchId>(microbatches))
      steps.push_back({Phase::kEncoderForward, e, false, {Pass::kF, j}});
    steps.push_back({Phase::kEncoderForward, e, true, {Pass::kF, MicrobatchId{0}}});
  }
  for (const StageAction& a : llm_order) steps.push_back({Phase::kLlm, llm, false, a});
  for (auto it = encoders.rbegin(); it != encoders.rend(); ++it) {
    steps.push_back({Phase::kEncoderBackward, *it, true, {Pass::kB, MicrobatchId{0}}});
    for (const MicrobatchId j : IdRange<MicrobatchId>(microbatches))
      steps.push_back({Phase::kEncoderBackward, *it, false, {Pass::kB, j}});
  }
  return steps;
}

std::vector<PhaseStep> per_microbatch_order(const std::vector<int>& encoders, int llm,
                                            const std::vector<StageAction>& llm_order) {
  std::vector<PhaseStep> steps;
  for (const StageAction& a : llm_order) {
    if (a.pass == Pass::kF) {
      for (int e : encoders) steps.push_back({Phase::kEncoderForward, e, false, a});
      steps.push_back({Phase::kLlm, llm, false, a});
    } else {
      steps.push_back({Phase::kLlm, llm, false, a});
      for (auto it = encoders.rbegin(); it != encoders.rend(); ++it)
        steps.push_back({Phase::kEncoderBackward, *it, false, {Pass::kB, a.microbatch}});
    }
  }
  return steps;
}

}  // namespace loom
