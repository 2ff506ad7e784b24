// The simulation backends' registry: the names every --backend lists, the error for an
// unknown one, and a run through the registry giving what the backend itself gives.
#include "app/backends.hpp"

#include <gtest/gtest.h>

#include "core/errors.hpp"
#include "core/evaluator.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

TEST(Backends, NamesInTheOrderHelpTextsAndValidateUse) {
  EXPECT_EQ(backend_names(), (std::vector<std::string>{"evaluator", "simgrid"}));
  EXPECT_EQ(backend_name_list(), "evaluator or simgrid");
  EXPECT_EQ(backend_name_list(true), "\"evaluator\" or \"simgrid\"");
  EXPECT_EQ(backend_help(), "evaluator (contention-free, fast) or simgrid (link contention)");
}

TEST(Backends, UnknownNameListsTheValidOnes) {
  try {
    find_backend("ns3");
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'ns3' (valid: evaluator or simgrid)"), std::string::npos)
        << e.what();
  }
}

TEST(Backends, OnlySimGridRunsOncePerProcess) {
  EXPECT_FALSE(find_backend("evaluator").once_per_process);
  EXPECT_TRUE(find_backend("simgrid").once_per_process);
  EXPECT_EQ(find_backend("evaluator").bytes_per_gpu, 0);
  EXPECT_GT(find_backend("simgrid").bytes_per_gpu, 0);
}

TEST(Backends, EvaluatorThroughTheRegistryIsTheEvaluator) {
  const auto study = test::example("uniform-1f1b.toml", {"sim.backend=evaluator"});
  const BackendRun run = simulate(*study);
  EXPECT_EQ(run.timeline.iteration_time_s(),
            evaluate(study->schedule, study->config.cluster).iteration_time_s());
  EXPECT_EQ(run.activities, study->schedule.num_ops());
}

}  // namespace
}  // namespace loom
