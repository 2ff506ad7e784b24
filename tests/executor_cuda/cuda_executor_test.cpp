// The cuda backend's factory without a GPU: `loom exec --backend cuda` must end with an
// InputError (exit 2) that says why, never crash or hang.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/errors.hpp"
#include "executor/backend.hpp"
#include "executor/cuda/model_state.hpp"
#include "executor/host_backend.hpp"
#include "kernels/cuda/device.hpp"
#include "test_support.hpp"

namespace loom::exec {
namespace {

TEST(CudaExecutor, WithoutADeviceTheFactoryThrowsInputError) {
  if (kernels::cuda_device_count() > 0) GTEST_SKIP() << "a GPU is present";
  try {
    make_cuda_executor();
    FAIL() << "no device, yet a cuda executor was made";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("no usable CUDA device"), std::string::npos) << e.what();
  }
}

TEST(CudaExecutor, WithADeviceTheFactoryNamesTheBackend) {
  if (kernels::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  EXPECT_EQ(make_cuda_executor()->name(), "cuda");
}

TEST(CudaExecutor, ProcessRankComesFromTheLauncherSoOnlyRankZeroWrites) {
  if (kernels::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const auto executor = make_cuda_executor();
  EXPECT_EQ(executor->process_rank(), 0);  // no launcher: one process
  ::setenv("RANK", "1", 1);
  ::setenv("WORLD_SIZE", "2", 1);
  EXPECT_EQ(executor->process_rank(), 1);
  ::unsetenv("RANK");
  ::unsetenv("WORLD_SIZE");
  EXPECT_EQ(make_host_executor()->process_rank(), 0);  // every rank in one process
}

TEST(CudaExecutor, ReceiversSizeMessagesFromTheScheduleAlone) {
  // configs/exec/vlm-host.toml: 64 image patches and 32 text tokens per sample; the
  // projector merges 4 patches into 1 LLM token, the LLM reads 16 merged + 32 text rows.
  const auto study = prepare_study(test::source_path("configs/exec/vlm-host.toml"), {});
  const Model& model = study->config.model;
  const std::vector<Sample>& samples = study->problem.samples;
  const std::vector<SampleId> two = {SampleId{0}, SampleId{1}};
  const int vision_last = 1, projector = 2, llm_first = 3;
  EXPECT_EQ(cuda::layer_output_lengths(model, samples, two, 0), (std::vector<int>{64, 64}));
  EXPECT_EQ(cuda::layer_output_lengths(model, samples, two, vision_last),
            (std::vector<int>{64, 64}));
  EXPECT_EQ(cuda::layer_output_lengths(model, samples, two, projector), (std::vector<int>{16, 16}));
  EXPECT_EQ(cuda::layer_output_lengths(model, samples, two, llm_first), (std::vector<int>{48, 48}));
}

}  // namespace
}  // namespace loom::exec
