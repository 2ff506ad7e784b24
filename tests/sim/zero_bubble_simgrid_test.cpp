// zb-h1, zb-h2, interleaved-1f1b (Megatron's groups too), zb-v, looped-bfs, interleaved-zb,
// dualpipe-v (overlapped F+B pairs) and chimera (two pipelines, cross-copy all-reduce)
// in the SimGrid backend against the contention-free evaluator: with messages that cost
// latency but (almost) no bandwidth no link is contended, so the two agree op by op. Each test runs
// in its own process (one SimGrid engine per process).
#include <gtest/gtest.h>

#include "core/evaluator.hpp"
#include "core/validate.hpp"
#include "sim/simgrid_backend.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

void expect_backends_agree(const std::string& scheduler, int chunks, int microbatches = 8,
                           int group = 0) {
  test::TempDir dir;
  const std::string config =
      "[[model.modules]]\nname = \"llm\"\nkind = \"llm\"\nlayers = 16\nhidden = 1024\n"
      "[cost]\nmodel = \"table\"\n[cost.table.llm]\nforward = \"1ms\"\ninput_grad = \"1ms\"\n"
      "weight_grad = \"0.5ms\"\nactivation_bytes = \"1MiB\"\noutput_bytes = \"1KiB\"\n"
      "[cluster]\nnodes = 2\ngpus_per_node = 4\ngpu = \"A100-80GB\"\n"
      "intra_node = { bandwidth = \"300GBps\", latency = \"5us\" }\n"
      "inter_node = { bandwidth = \"25GBps\", latency = \"20us\" }\n"
      "[parallel]\npp = 4\ndp = 2\n[schedule]\nname = \"" +
      scheduler + "\"\nmicrobatches = " + std::to_string(microbatches) + "\n[schedule." +
      scheduler + "]\n" + (chunks != 1 ? "chunks = " + std::to_string(chunks) + "\n" : "") +
      (group != 0 ? "microbatch_group_size = " + std::to_string(group) + "\n" : "");
  const auto study = prepare_study(dir.write("zb.toml", config), {});
  const Schedule& s = study->schedule;
  validate(s, study->config.model);
  const Timeline predicted = evaluate(s, study->config.cluster);
  const Timeline simulated = run_simgrid(s, study->config.cluster);
  ASSERT_GT(predicted.iteration_time_s(), 0.0);
  // 1 KiB over >= 25 GB/s is < 50 ns even when two messages share a link.
  EXPECT_NEAR(simulated.iteration_time_s(), predicted.iteration_time_s(), 1e-7);
  for (const RankId r : predicted.timings.ids()) {
    for (size_t i = 0; i < predicted.timings[RankId{r}].size(); ++i) {
      EXPECT_NEAR(simulated.timings[RankId{r}][i].end_s, predicted.timings[RankId{r}][i].end_s,
                  1e-7)
          << scheduler << " rank " << r << " op " << to_string(s.programs[RankId{r}][i], s);
    }
  }
}

}  // namespace

TEST(ZeroBubbleSimGrid, ZbH1AgreesWithTheEvaluator) {
  expect_backends_agree("zb-h1", 1);
}

TEST(ZeroBubbleSimGrid, ZbH2AgreesWithTheEvaluator) {
  expect_backends_agree("zb-h2", 1);
}

TEST(ZeroBubbleSimGrid, InterleavedAgreesWithTheEvaluator) {
  expect_backends_agree("interleaved-1f1b", 2);
}

TEST(ZeroBubbleSimGrid, ZbVAgreesWithTheEvaluator) {
  expect_backends_agree("zb-v", 1);  // the V: stage p-1 -> p stays on rank p-1
}

TEST(ZeroBubbleSimGrid, LoopedBfsAgreesWithTheEvaluator) {
  expect_backends_agree("looped-bfs", 2);
}

TEST(ZeroBubbleSimGrid, InterleavedInGroupsOfFiveAgreesWithTheEvaluator) {
  expect_backends_agree("interleaved-1f1b", 2, 9, 5);  // Megatron: groups of 5 and 4
}

TEST(ZeroBubbleSimGrid, InterleavedZbAgreesWithTheEvaluator) {
  expect_backends_agree("interleaved-zb", 2);
}

TEST(ZeroBubbleSimGrid, DualPipeVAgreesWithTheEvaluator) {
  expect_backends_agree("dualpipe-v", 1);  // overlapped pairs: messages grouped around them
}

TEST(ZeroBubbleSimGrid, DualPipeVWithElevenMicrobatchesAgreesWithTheEvaluator) {
  expect_backends_agree("dualpipe-v", 1, 11);
}

TEST(ZeroBubbleSimGrid, ChimeraAgreesWithTheEvaluator) {
  // dp = 2: each all-reduce spans the two copies of two replicas (4 ranks, 2 nodes).
  expect_backends_agree("chimera", 1);
}

TEST(ZeroBubbleSimGrid, ChimeraWithThreeUnitsAgreesWithTheEvaluator) {
  expect_backends_agree("chimera", 1, 12);
}

}  // namespace loom
