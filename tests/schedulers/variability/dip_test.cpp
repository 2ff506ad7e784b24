// dip (baseline-schedules.md §5, DIP ASPLOS'26; dissertation Fig 4.2c): separated
// partitioning, colocated chunks, MCTS + greedy dual-queue interleaving under a cap.
#include "schedulers/variability/dip.hpp"

#include <gtest/gtest.h>

#include <set>

#include "core/errors.hpp"
#include "core/evaluator.hpp"
#include "core/index.hpp"
#include "core/timeline.hpp"
#include "core/validate.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

std::vector<std::string> op_strings(const Schedule& s) {
  std::vector<std::string> out;
  for (const auto& program : s.programs)
    for (const Op& op : program) out.push_back(to_string(op, s));
  return out;
}

double worst_memory(const Schedule& s) {
  const auto peaks = activation_peaks(s);
  double worst = 0;
  for (int r = 0; r < s.num_ranks(); ++r)
    worst = std::max(worst, s.static_memory[RankId{r}].total() + peaks[RankId{r}].bytes);
  return worst;
}

}  // namespace

// Separated partitioning: K_i from the modalities' time ratio, P x K_i chunks each, chunk
// c on rank c mod P, every modality present on every rank (colocated).
TEST(Dip, SeparatedPartitioningColocatesEveryModalityOnEveryRank) {
  const auto study = test::fixture("two-encoders.toml", {"schedule.name=dip"});
  const DipLayout layout = dip_layout(study->problem);
  const int P = study->problem.parallel.pp;
  ASSERT_EQ(layout.k.size(), 3u);                                     // vision, audio, LLM
  EXPECT_EQ(*std::min_element(layout.k.begin(), layout.k.end()), 1);  // K_1 = 1
  std::vector<int> count(layout.k.size(), 0);
  std::vector<std::set<PipelineRank>> ranks(layout.k.size());
  for (const DipChunk& c : layout.chunks) {
    EXPECT_EQ(c.rank, PipelineRank{count[static_cast<size_t>(c.modality)]++ % P});
    ranks[static_cast<size_t>(c.modality)].insert(c.rank);
  }
  for (size_t i = 0; i < layout.k.size(); ++i) {
    EXPECT_EQ(count[i], P * layout.k[i]);
    EXPECT_EQ(isize(ranks[i]), P);
  }
}

// Valid on the examples (prepare_study validated: every layer once per microbatch, no
// deadlock), every sample once, with dp = 2 replicas too.
TEST(Dip, ValidScheduleOnTheExamples) {
  for (const auto& [file, extra] : std::vector<std::pair<std::string, std::string>>{
           {"vlm-frozen.toml", "parallel.dp=1"}, {"two-encoders.toml", "parallel.dp=1"}}) {
    const auto study = file == "vlm-frozen.toml"
                           ? test::example(file, {"schedule.name=dip", extra})
                           : test::fixture(file, {"schedule.name=dip", extra});
    std::set<SampleId> seen;
    for (const auto& mb : study->schedule.samples.front()) seen.insert(mb.begin(), mb.end());
    EXPECT_EQ(seen.size(), study->problem.samples.size()) << file;
    EXPECT_GT(evaluate(study->schedule, study->config.cluster).iteration_time_s(), 0);
  }
  const auto two =
      test::example("vlm-frozen.toml", {"schedule.name=dip", "parallel.dp=2", "cluster.nodes=2"});
  EXPECT_EQ(two->schedule.num_ranks(), 8);
}

// The memory cap: a cap below the uncapped schedule's peak is respected (the forward
// queue waits), at some cost in time; a cap nothing fits under is InfeasibleError.
TEST(Dip, RespectsItsMemoryCap) {
  auto study = test::example("vlm-frozen.toml", {"schedule.name=dip", "schedule.microbatches=12"});
  SchedulingProblem problem = study->problem;
  const Schedule free_run = dip_schedule(problem, nullptr);
  const double peak = worst_memory(free_run);
  double floor = 0;
  for (const auto& m : free_run.static_memory) floor = std::max(floor, m.total());
  ASSERT_GT(peak, floor);
  set_option(problem.schedule, "dip", "memory_cap_gb", (floor + 0.5 * (peak - floor)) / 1e9);
  const Schedule capped = dip_schedule(problem, nullptr);
  validate(capped, *problem.model);
  EXPECT_LE(worst_memory(capped), dip_options().read(problem.schedule, "dip").memory_cap_gb * 1e9);
  set_option(problem.schedule, "dip", "memory_cap_gb", floor / 1e9);
  EXPECT_THROW(dip_schedule(problem, nullptr), InfeasibleError);
}

// The search: deterministic for a seed under an iteration budget, never worse than its
// root order, and stops at the iteration budget or the time budget.
TEST(Dip, SearchIsDeterministicAndStaysWithinItsBudget) {
  auto study = test::fixture("two-encoders.toml", {"schedule.name=dip"});
  SchedulingProblem problem = study->problem;
  set_option(problem.schedule, "dip", "search_iterations", std::int64_t{30});
  set_option(problem.schedule, "dip", "search_budget_s", 1e6);
  DipSearchStats a, b;
  const Schedule s1 = dip_schedule(problem, &a);
  const Schedule s2 = dip_schedule(problem, &b);
  EXPECT_EQ(op_strings(s1), op_strings(s2));
  EXPECT_EQ(a.iterations, 30);
  EXPECT_EQ(a.rollouts, 300);
  EXPECT_LE(a.best_makespan_s, a.initial_makespan_s);
  set_option(problem.schedule, "dip", "search_budget_s",
             0.0);  // a zero time budget: no iteration at all
  DipSearchStats c;
  dip_schedule(problem, &c);
  EXPECT_EQ(c.iterations, 0);
  EXPECT_DOUBLE_EQ(c.best_makespan_s, c.initial_makespan_s);
}

// search_iterations = 0 is the dissertation's DIP (§4.7.2): the root order, every encoder
// unit before any LLM unit, unsearched; the search can only match or beat it.
TEST(Dip, ZeroSearchIterationsRunsTheRootOrder) {
  auto study = test::fixture("two-encoders.toml", {"schedule.name=dip"});
  SchedulingProblem problem = study->problem;
  set_option(problem.schedule, "dip", "search_iterations", std::int64_t{0});
  DipSearchStats root;
  const Schedule unsearched = dip_schedule(problem, &root);
  validate(unsearched, *problem.model);
  EXPECT_EQ(root.iterations, 0);
  EXPECT_EQ(root.rollouts, 0);
  EXPECT_DOUBLE_EQ(root.best_makespan_s, root.initial_makespan_s);
  set_option(problem.schedule, "dip", "search_iterations", std::int64_t{30});
  DipSearchStats searched;
  dip_schedule(problem, &searched);
  EXPECT_DOUBLE_EQ(searched.initial_makespan_s, root.initial_makespan_s);
  EXPECT_LE(searched.best_makespan_s, root.best_makespan_s);
}

}  // namespace loom
