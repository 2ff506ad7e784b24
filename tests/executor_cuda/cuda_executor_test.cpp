// The cuda backend's factory without a GPU: `loom exec --backend cuda` must end with an
// InputError (exit 2) that says why, never crash or hang.
#include <gtest/gtest.h>

#include <string>

#include "core/errors.hpp"
#include "executor/backend.hpp"
#include "kernels/cuda/device.hpp"

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

}  // namespace
}  // namespace loom::exec
