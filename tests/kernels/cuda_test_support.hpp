#pragma once
// Shared by the CUDA kernel tests: skip cleanly without a GPU, and a tolerance check.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/cuda/device.hpp"

namespace loom::kernels::test {

/// Skips the calling test when no CUDA device is usable (no driver, or no GPU).
#define LOOM_REQUIRE_GPU()                                                           \
  do {                                                                               \
    if (::loom::kernels::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

/// |got - want| <= atol + rtol |want| for every element (first failure reported).
inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, float atol,
                         float rtol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(want[i]) && got[i] == want[i]) continue;
    ASSERT_LE(std::fabs(got[i] - want[i]), atol + rtol * std::fabs(want[i]))
        << what << "[" << i << "]: got " << got[i] << ", want " << want[i];
  }
}

}  // namespace loom::kernels::test
