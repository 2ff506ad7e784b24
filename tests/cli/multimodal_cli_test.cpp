// End-to-end: invalid per-module layouts exit 2 naming the module; every multimodal
// scheduler runs on a paper config through the `loom` binary.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_support.hpp"
#include "config_sweep.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

using Outcome = test::CliResult;

Outcome loom(const std::string& args) {
  return test::run_loom(args);
}

const std::string kTwoEncoders = test::source_path("tests/data/two-encoders.toml");

using test::expect_exit;

}  // namespace

TEST(MultimodalCli, InvalidLayoutsExit2NamingTheModule) {
  const std::string base = "config " + kTwoEncoders;
  // TP x CP x PP x DP does not match the rank set.
  expect_exit(base +
                  " --set parallel.modules.llm.pp=2 --set parallel.modules.llm.gpus=0-2"
                  " --set parallel.modules.vision.gpus=3 --set parallel.modules.audio.gpus=3",
              2, {"two-encoders.toml", "parallel.modules.llm", "tp x cp x pp x dp"});
  // Rank sets that overlap without being identical.
  expect_exit(base +
                  " --set parallel.modules.llm.pp=2 --set parallel.modules.llm.gpus=0-1"
                  " --set parallel.modules.vision.pp=2 --set parallel.modules.vision.gpus=1-2"
                  " --set parallel.modules.audio.gpus=3",
              2, {"parallel.modules.llm", "'vision'", "partly overlaps"});
  // An encoder branch feeding nothing.
  expect_exit(base + " --set 'model.modules.llm.inputs=[\"vproj\"]'", 2,
              {"model.modules.aproj", "feeds nothing"});
  // An encoder without a layout while others have one.
  expect_exit(base + " --set parallel.modules.llm.dp=4", 2, {"parallel.modules.vision: missing"});
}

TEST(MultimodalCli, SequenceParallelShardsEveryModuleWithTensorParallelism) {
  // Per-module layouts set tp per module; sequence parallelism applies to each module
  // that runs TP > 1 (both do here, tp 4) and shards what it replicates: less memory.
  const std::string config =
      test::source_path("configs/paper/hetero-1b7b-64k-v75-homogeneous.toml");
  test::TempDir dir;
  const auto peak_gib = [&](const std::string& extra, const std::string& out) {
    const Outcome r =
        loom("sim " + config + extra + " --backend evaluator --no-plot -q --out " + dir.path(out));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const nlohmann::json m = nlohmann::json::parse(test::slurp(dir.path(out) + "/metrics.json"));
    double peak = 0;
    for (const auto& rank : m["per_rank"])
      peak = std::max(peak, rank["peak_memory_bytes"].get<double>());
    return peak / (1 << 30);
  };
  const double replicated = peak_gib("", "off");
  const double sharded = peak_gib(" --set parallel.sequence_parallel=true", "on");
  EXPECT_LT(sharded, 0.95 * replicated);
  // With every module at TP 1 there is nothing to shard: exit 2 naming the key and the fix.
  expect_exit("sim " + config +
                  " --set parallel.sequence_parallel=true --set parallel.modules.vision.tp=1"
                  " --set parallel.modules.llm.tp=1 --set parallel.modules.vision.dp=4"
                  " --set parallel.modules.llm.dp=4",
              2, {"parallel.sequence_parallel", "parallel.modules.<name>.tp"});
}

TEST(MultimodalCli, EveryMultimodalSchedulerRunsOnAPaperConfig) {
  const std::string config = test::source_path("configs/paper/cornstarch-sss.toml");
  for (const char* s : {"encoders-replicated", "encoders-colocated", "cornstarch", "1f1b"}) {
    test::TempDir dir;
    const Outcome r = loom("sim " + config + " --no-plot -q --set schedule.name=" + s + " --out " +
                           dir.path("out"));
    EXPECT_EQ(r.exit_code, 0) << s << "\n" << r.output;
    EXPECT_NE(r.output.find(std::string("scheduler ") + s), std::string::npos) << r.output;
  }
}

namespace {

/// The registered schedulers, as `loom schedulers` lists them.
std::vector<std::string> listed_schedulers() {
  const Outcome listed = loom("schedulers");
  EXPECT_EQ(listed.exit_code, 0);
  std::vector<std::string> schedulers;
  for (size_t at = 0; at < listed.output.size();) {
    const size_t end = listed.output.find('\n', at);
    schedulers.push_back(listed.output.substr(at, listed.output.find('\t', at) - at));
    at = end == std::string::npos ? listed.output.size() : end + 1;
  }
  std::sort(schedulers.begin(), schedulers.end());
  return schedulers;
}

class ShippedConfig : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(ShippedConfig, RunsOrIsRejectedByNameUnderEveryScheduler) {
  // Every config in configs/examples and configs/paper (configs/bench are benchmarks of
  // thousands of ranks) passes `loom config` and runs under its own scheduler; with every
  // registered scheduler (`loom sim --schedulers all`, one table) each either runs (ok),
  // rejects the layout naming the scheduler (failed: the exit-2 message), or reports the
  // request infeasible (e.g. GPipe's live activations on a config tuned for 1F1B). One
  // process per config, one test per config so ctest spreads them over its jobs; the
  // dataset-sized configs wait for LOOM_SLOW_TESTS as in the golden sweep.
  if (test::skip_slow(GetParam())) {
    GTEST_SKIP() << "LOOM_SLOW_TESTS unset";
  }
  const std::string config = test::source_path("configs/" + GetParam() + ".toml");
  const std::vector<std::string> schedulers = listed_schedulers();
  ASSERT_GE(schedulers.size(), 7u);
  const Outcome checked = loom("config " + config);
  EXPECT_EQ(checked.exit_code, 0) << config << "\n" << checked.output;
  test::TempDir dir;
  const Outcome own =
      loom("sim " + config + " --backend evaluator --no-plot -q --out " + dir.path("own"));
  EXPECT_EQ(own.exit_code, 0) << config << "\n" << own.output;
  const Outcome all = loom("sim " + config + " --backend evaluator --no-plot -q" +
                           " --schedulers all --out " + dir.path("all"));
  ASSERT_EQ(all.exit_code, 0) << config << "\n" << all.output;
  std::ifstream csv(dir.path("all") + "/schedulers.csv");
  std::string line;
  std::getline(csv, line);  // the header
  std::vector<std::string> seen;
  int ran = 0;
  while (std::getline(csv, line)) {
    const std::string s = line.substr(0, line.find(','));
    const size_t status_end = line.find(',', s.size() + 1);
    const std::string status = line.substr(s.size() + 1, status_end - s.size() - 1);
    seen.push_back(s);
    EXPECT_TRUE(status == "ok" || status == "failed" || status == "infeasible") << line;
    EXPECT_EQ(line.find("internal error"), std::string::npos) << line;
    if (status == "ok") ++ran;
    if (status == "failed") {  // the reason names the scheduler
      EXPECT_NE(line.find(s, status_end), std::string::npos) << line;
    }
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, schedulers);
  // Cornstarch's configs are multimodal pipelines every multimodal scheduler serves.
  if (GetParam().starts_with("paper/cornstarch-")) {
    EXPECT_GE(ran, 7);
  }
}

INSTANTIATE_TEST_SUITE_P(MultimodalCli, ShippedConfig, ::testing::ValuesIn(test::shipped_configs()),
                         [](const auto& param) { return test::test_name(param.param); });

TEST(MultimodalCli, StageSummaryFollowsTheRanksStages) {
  // hetero-* lay ranks out per GPU (colocated) or per module stage (non-colocated), so
  // rank index != stage: the summary must find each stage's rank from the IR.
  const std::string config = test::source_path("configs/paper/cornstarch-sss.toml");
  auto stages = [&](const std::string& scheduler) {
    test::TempDir dir;
    const Outcome r = loom("sim " + config + " --backend evaluator --no-plot -q" +
                           " --set schedule.name=" + scheduler + " --out " + dir.path("out"));
    EXPECT_EQ(r.exit_code, 0) << scheduler << "\n" << r.output;
    std::vector<std::string> lines;  // the module ranges after "stage k:"
    for (int k = 0;; ++k) {
      const std::string head = "  stage " + std::to_string(k) + ":";
      const size_t at = r.output.find(head);
      if (at == std::string::npos) break;
      const size_t end = r.output.find('\n', at);
      lines.push_back(r.output.substr(at + head.size(), end - at - head.size()));
    }
    return lines;
  };
  const auto colocated = stages("hetero-colocated");
  ASSERT_EQ(colocated.size(), 2u + 6u);  // one stage per encoder group, the LLM's six
  EXPECT_EQ(colocated[0], " vision[0,32) vproj[32,33)");
  EXPECT_EQ(colocated[1], " audio[33,57) aproj[57,58)");
  for (size_t k = 2; k < colocated.size(); ++k)
    EXPECT_EQ(colocated[k].find(" llm["), 0u) << "stage " << k << ":" << colocated[k];
  const auto noncolocated = stages("hetero-noncolocated");
  ASSERT_EQ(noncolocated.size(), 6u);  // vision, audio, four LLM stages
  EXPECT_EQ(noncolocated[0], " vision[0,32) vproj[32,33)");
  EXPECT_EQ(noncolocated[1], " audio[33,57) aproj[57,58)");
  for (size_t k = 2; k < noncolocated.size(); ++k)
    EXPECT_EQ(noncolocated[k].find(" llm["), 0u) << "stage " << k << ":" << noncolocated[k];
  // Layer-by-layer compute (CP all-gathers between layers) prints as one range per module,
  // and per-module layouts are named in the header.
  test::TempDir dir;
  const Outcome r =
      loom("sim " + test::source_path("configs/paper/hetero-1b7b-64k-v75-colocated.toml") +
           " --backend evaluator --no-plot -q --out " + dir.path("out"));
  EXPECT_NE(r.output.find("  stage 0: vision[0,20) projector[20,21)\n"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("  stage 1: llm[21,53)\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("llm tp 2 cp 8 pp 1 dp 2 on GPUs 0-31"), std::string::npos) << r.output;
}

}  // namespace loom
