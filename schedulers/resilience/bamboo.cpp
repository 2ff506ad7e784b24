// Bamboo (Thorpe et al., NSDI'23; dissertation §2.2 "Redundant computation"): 1F1B in
// which every stage also holds its successor's layers and runs their forward right after
// its own, on its own output (forward redundant computation, FRC). The copy holds the
// successor's whole model state, so when the successor's node is preempted this stage
// takes over its training without a restart (backward redundant computation runs only
// then, lazily). The last stage holds stage 0's copy, closing the ring.
//
//   stage 0: F0 F0'  F1 F1' ...   F' = the successor's forward, run on this stage's output
//   stage 3: F0 F0'  B0 ...       (ring: stage 3 holds stage 0's copy)
//
// Time and memory of FRC then come from the cost model through the schedule: every
// forward is followed by the successor's (Bamboo's eager FRC also fills bubbles where it
// can, so this placement is an upper bound), the copy's activations stay until the
// stage's own backward (the paper swaps them to host memory; Loom keeps them on the GPU),
// and every rank holds two stages' parameters, gradients and optimizer states (§2.7.1:
// "requiring 2x memory").
//
// Failover (schedule.failed_over = [k, ...]): stage k's node is gone and the rank of its
// ring predecessor runs stage k as well, forward and backward, after its own stage; the
// pipeline has parallel.pp ranks for pp + |failed_over| stages. A failed stage 0 runs on
// stage 1's rank (its ring predecessor is the last stage; what sets the time is that one
// rank runs two stages, and keeping the chain contiguous keeps 1F1B's order); with stage 2
// lost as well that rank runs three stages where Bamboo splits them over two nodes, an
// overestimate of the straggler. A stage whose copy holder is gone, or whose successor
// shares its rank, has no copy.
#include <algorithm>
#include <set>

#include "core/errors.hpp"
#include "core/index.hpp"
#include "schedulers/lowering/lowering.hpp"

namespace loom {
namespace {

struct BambooOptions {
  std::vector<int> failed_over;
};

const OptionSet<BambooOptions> kOptions{
    {"failed_over", &BambooOptions::failed_over,
     "stages whose node is lost and whose ring predecessor runs them (Bamboo's failover); "
     "the pipeline then has parallel.pp ranks and pp + len(failed_over) stages",
     at_least(0)},
};

/// Checks the failed_over option against `stages` and returns it as a set.
std::set<int> failed_stages(const std::vector<int>& list, int stages) {
  const std::set<int> failed(list.begin(), list.end());
  if (failed.size() != list.size())
    throw InputError("schedule.bamboo.failed_over: a stage is listed twice");
  for (int k : failed) {
    if (k >= stages)
      throw InputError("schedule.bamboo.failed_over: stage " + std::to_string(k) +
                       " does not exist (" + std::to_string(stages) +
                       " stages: parallel.pp + the failed-over ones)");
    if (failed.count((k + 1) % stages))
      throw InputError("schedule.bamboo.failed_over: stages " + std::to_string(k) + " and " +
                       std::to_string((k + 1) % stages) +
                       " are adjacent: the second's only copy was on the first's node, so "
                       "Bamboo restarts instead of failing over");
  }
  return failed;
}

}  // namespace

std::vector<OptionSpec> bamboo_options() {
  return kOptions.specs();
}

Schedule generate_bamboo(const SchedulingProblem& problem) {
  const char* name = "bamboo";
  const BambooOptions o = kOptions.read(problem.schedule, name);
  const int ranks = problem.parallel.pp;
  const int stages = ranks + isize(o.failed_over);
  if (stages < 2)
    throw InputError(
        "parallel.pp: bamboo needs at least 2 stages (a stage's redundant copy "
        "lives on its neighbour); set parallel.pp >= 2");
  if (problem.parallel.ep > 1)
    throw InputError(
        "parallel.ep: bamboo's redundant copy of a stage would run its MoE layers' "
        "all-to-alls a second time, which is not modelled; set parallel.ep = 1");
  const std::set<int> failed = failed_stages(o.failed_over, stages);
  StageGraph graph = pipeline_stage_graph(problem, name, stages);

  // A failed stage joins its predecessor's rank (stage 0 joins stage 1's).
  PerStage<PipelineRank> stage_rank;
  for (int s = 0, r = -1; s < stages; ++s) {
    const bool joins = (s > 0 && failed.count(s)) || (s == 1 && failed.count(0));
    if (!joins) ++r;
    stage_rank.push_back(PipelineRank{r});
  }
  for (int s = 0; s < stages; ++s) {
    const int next = (s + 1) % stages;
    if (!failed.count(s) && stage_rank[StageId{next}] != stage_rank[StageId{s}])
      graph[StageId{s}].forward_copies.successor = graph[StageId{next}].segments;
  }

  // 1F1B over the ranks; a rank runs its stages' forwards in order, backwards in reverse.
  std::vector<int> warmup;
  for (int r = 0; r < ranks; ++r) warmup.push_back(ranks - r - 1);
  const StageOrders rank_orders = one_f_one_b_orders(warmup, problem.schedule.microbatches);
  RankOrders orders(ranks);
  for (int r = 0; r < ranks; ++r) {
    std::vector<int> held;
    for (int s = 0; s < stages; ++s)
      if (stage_rank[StageId{s}] == PipelineRank{r}) held.push_back(s);
    for (const StageAction& a : rank_orders[StageId{r}]) {
      std::vector<int> order = held;
      if (a.pass != Pass::kF) std::reverse(order.begin(), order.end());
      for (int s : order)
        orders[PipelineRank{r}].push_back(
            {.stage = StageId{s}, .pass = a.pass, .microbatch = a.microbatch});
    }
  }
  const PipelinePrograms programs{.stages = std::move(graph),
                                  .ranks = ranks,
                                  .stage_rank = std::move(stage_rank),
                                  .replicas = {std::move(orders)}};
  return lower(problem, name, programs);
}

}  // namespace loom
