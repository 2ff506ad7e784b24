// Properties every registered scheduler keeps on random small configs (seeded, so a
// failure reproduces): the schedule validates (every sample's forward and backward
// exactly once, every dependency produced before it is consumed, no cycle of waits), the
// evaluator finishes it (no deadlock), it fits the memory the planner checked, and a
// rerun gives the identical schedule. A request a scheduler cannot serve must say so with
// InputError or InfeasibleError, never anything else.
#include <gtest/gtest.h>

#include <random>

#include "core/errors.hpp"
#include "core/evaluator.hpp"
#include "core/validate.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

std::string program_text(const Schedule& s) {
  std::string out;
  for (int r = 0; r < s.num_ranks(); ++r) {
    for (const Op& op : s.programs[RankId{r}]) out += to_string(op, s) + " ";
    out += "\n";
  }
  return out;
}

TEST(EveryScheduler, RandomSmallConfigsValidateRunAndRerunIdentically) {
  const char* configs[] = {"configs/examples/uniform-1f1b.toml", "configs/examples/vlm-frozen.toml",
                           "tests/data/two-encoders.toml"};
  std::mt19937 rng(20261125);
  for (const SchedulerInfo& info : scheduler_registry()) {
    int ran = 0;
    for (int trial = 0; trial < 6; ++trial) {
      const std::string config = configs[trial % 3];
      const int pp = std::uniform_int_distribution<int>(1, 4)(rng);
      const int m = pp * std::uniform_int_distribution<int>(1, 3)(rng);
      const int dp = std::uniform_int_distribution<int>(1, 2)(rng);
      const std::vector<std::string> overrides = {
          "schedule.name=" + std::string(info.name), "parallel.pp=" + std::to_string(pp),
          "parallel.dp=" + std::to_string(dp), "schedule.microbatches=" + std::to_string(m),
          "cluster.nodes=2",
          // Every other trial overlaps the data-parallel reduction in small buckets.
          std::string("parallel.overlap_grad_reduce=") + (trial % 2 ? "true" : "false"),
          "parallel.grad_bucket_size=1e6"};
      const std::string what = std::string(info.name) + " on " + config + " pp " +
                               std::to_string(pp) + " dp " + std::to_string(dp) + " m " +
                               std::to_string(m) + (trial % 2 ? " overlapped" : "");
      std::unique_ptr<Study> a, b;
      try {
        a = prepare_study(test::source_path(config), overrides);
      } catch (const InputError&) {
        continue;  // the scheduler does not serve this layout, and said so
      } catch (const InfeasibleError&) {
        continue;
      }
      ++ran;
      const Schedule& s = a->schedule;
      const Model& model = *a->problem.model;
      EXPECT_NO_THROW(validate(s, model)) << what;
      EXPECT_NO_THROW(check_fits_memory(s, a->problem.cluster->gpu.memory_bytes)) << what;
      const Timeline t = evaluate(s, *a->problem.cluster);
      EXPECT_GT(t.iteration_time_s(), 0) << what;
      b = prepare_study(test::source_path(config), overrides);
      EXPECT_EQ(program_text(s), program_text(b->schedule)) << what;
      EXPECT_EQ(t.iteration_time_s(), evaluate(b->schedule, *b->problem.cluster).iteration_time_s())
          << what;
    }
    EXPECT_GE(ran, 1) << info.name << " ran on none of the random configs";
  }
}

}  // namespace
}  // namespace loom
