// End to end on one GPU: the cuda backend runs gpipe and 1f1b single-stage schedules of
// the host-scale VLM (frozen encoder, trainable projector, frozen or trainable LLM) and
// its accumulated gradients pass the same check against the sequential host reference
// as the host backend does (kGradientTolerance). Skips without a GPU.
#include <gtest/gtest.h>

#include "executor/backend.hpp"
#include "executor/reference.hpp"
#include "kernels/cuda/device.hpp"
#include "test_support.hpp"

namespace loom::exec {
namespace {

void expect_equivalent(const std::vector<std::string>& overrides) {
  const auto study = prepare_study(test::source_path("configs/exec/vlm-host.toml"), overrides);
  const ExecProblem p{&study->schedule, &study->config.model, &study->problem.samples, 7};
  const ExecResult result = make_cuda_executor()->run(p, {});
  ASSERT_EQ(result.timeline.timings.size(), 1u);
  for (const OpTiming& t : result.timeline.timings[0]) EXPECT_LE(t.start_s, t.end_s);
  const GradientCheck c = check_gradients(p, result, reference_gradients(p, {}));
  EXPECT_TRUE(c.passed()) << (c.failures.empty() ? "" : c.failures.front());
  EXPECT_GT(c.tensors_checked, 0);
}

TEST(CudaGradients, SingleGpuSchedulesEqualTheSequentialRun) {
  if (kernels::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  for (const char* name : {"gpipe", "1f1b"}) {
    SCOPED_TRACE(name);
    expect_equivalent(
        {std::string("schedule.name=") + name, "parallel.pp=1", "cluster.gpus_per_node=1"});
    expect_equivalent({std::string("schedule.name=") + name, "parallel.pp=1",
                       "cluster.gpus_per_node=1", "model.modules.llm.frozen=false"});
  }
}

}  // namespace
}  // namespace loom::exec
