#pragma once
// Hand-written programs for the lowering's tests: the textbook model on two stages.
#include <memory>
#include <string>
#include <vector>

#include "schedulers/lowering/lowering.hpp"
#include "test_support.hpp"

namespace loom::test {

/// The textbook model (8 identical layers) on two stages of 4 layers, m = 2.
struct TwoStages {
  explicit TwoStages(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> overrides = {"parallel.pp=2", "schedule.microbatches=2"};
    overrides.insert(overrides.end(), extra.begin(), extra.end());
    study = test::example("uniform-1f1b.toml", overrides);
    programs.ranks = 2;
    programs.stages = chain_stages(*study->problem.model, {{0, 4}, {4, 8}});
  }
  Schedule lower_with(std::vector<RankOrders> replicas) {
    programs.replicas = std::move(replicas);
    return lower(study->problem, "test", programs);
  }
  std::string text(const Schedule& s, int rank) const {
    std::string out;
    for (const Op& op : s.programs[RankId{rank}])
      out += (out.empty() ? "" : " ") + to_string(op, s);
    return out;
  }
  std::unique_ptr<Study> study;
  PipelinePrograms programs;
};

inline RankAction act(int stage, Pass pass, int mb) {
  return {.stage = StageId{stage}, .pass = pass, .microbatch = MicrobatchId{mb}};
}

}  // namespace loom::test
