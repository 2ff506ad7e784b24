// Golden outputs of the SimGrid backend for the example configs (their own scheduler):
// iteration time, bubble fraction, per-rank busy time and peak memory, op order, as in
// tests/core/golden_test.cpp for the evaluator. SimGrid runs one engine per process, so
// each example is its own test (scripts/refresh_golden.sh runs them one by one).
#include <gtest/gtest.h>

#include "app/study.hpp"
#include "golden_support.hpp"
#include "sim/simgrid_backend.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

void expect_simgrid_golden(const std::string& example) {
  const auto study = test::example(example + ".toml");
  SimGridOptions options;
  options.network_model = study->config.sim.network_model;
  const Schedule& s = study->schedule;
  const Timeline timeline = run_simgrid(s, study->config.cluster, options);
  const std::string now = "# Golden output of configs/examples/" + example + ".toml, scheduler " +
                          s.scheduler +
                          ", SimGrid backend. Regenerate with scripts/refresh_golden.sh.\n" +
                          test::run_summary(s, compute_metrics(s, timeline));
  test::expect_golden(test::source_path("tests/golden/simgrid/" + example + ".txt"), now,
                      "configs/examples/" + example + ".toml (SimGrid)");
}

TEST(GoldenSimGrid, Uniform1f1b) {
  expect_simgrid_golden("uniform-1f1b");
}

TEST(GoldenSimGrid, VlmFrozen) {
  expect_simgrid_golden("vlm-frozen");
}

}  // namespace
}  // namespace loom
