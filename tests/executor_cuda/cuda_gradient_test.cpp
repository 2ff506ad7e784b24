// End to end on one GPU: the cuda backend runs gpipe and 1f1b single-stage schedules of
// the host-scale VLM (frozen encoder, trainable projector, frozen or trainable LLM) and
// its accumulated gradients pass the same check against the sequential host reference
// as the host backend does (kGradientTolerance). Skips without a GPU.
#include <gtest/gtest.h>

#include <variant>

#include "core/index.hpp"
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
  for (const OpTiming& t : result.timeline.timings[0_rank]) EXPECT_LE(t.start_s, t.end_s);
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

TEST(CudaGradients, AnAsyncBucketRunsOnTheGradientStreamBeforeTheOptimizerStep) {
  // One GPU cannot hold two replicas, so the overlapped buckets' path runs on a group of
  // one: the bucket (an identity sum) goes on the gradient stream after the backward,
  // and the optimizer step must wait for it. The check covers gradients and the update.
  if (kernels::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  auto study =
      prepare_study(test::source_path("configs/exec/vlm-host.toml"),
                    {"parallel.pp=1", "cluster.gpus_per_node=1", "model.modules.llm.frozen=false"});
  Schedule schedule = study->schedule;
  schedule.groups.push_back({0_rank});
  auto& program = schedule.programs[0_rank];
  ASSERT_TRUE(std::holds_alternative<OptimizerStep>(program.back()));
  program.insert(program.end() - 1, Collective{.kind = CollectiveKind::kAllReduce,
                                               .group = GroupId{schedule.groups.ssize() - 1},
                                               .bytes = 4,
                                               .async = true,
                                               .first_layer = 0,
                                               .end_layer = study->config.model.num_layers()});
  const ExecProblem p{&schedule, &study->config.model, &study->problem.samples, 7};
  const ExecResult result = make_cuda_executor()->run(p, {});
  const GradientCheck c = check_gradients(p, result, reference_gradients(p, {}));
  EXPECT_TRUE(c.passed()) << (c.failures.empty() ? "" : c.failures.front());
  EXPECT_GT(c.tensors_checked, 0);
}

}  // namespace
}  // namespace loom::exec
