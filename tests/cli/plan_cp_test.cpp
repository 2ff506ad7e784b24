// `loom plan cp`: exit codes, option names in errors, JSON owners, determinism.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_support.hpp"

namespace loom {
namespace {

using Result = test::CliResult;

Result loom_plan_cp(const std::string& args) {
  return test::run_loom("plan cp " + args, "2>/dev/null");
}

std::string stderr_of(const std::string& args) {
  return test::run_loom("plan cp " + args, "2>&1 >/dev/null").output;
}

TEST(PlanCp, PrintsEveryDistributionSideBySide) {
  const Result r = loom_plan_cp("--mask embedded --seq 8192 --cp 4 --distribution all");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* name :
       {"zigzag", "contiguous", "random", "random-tokens", "lpt", "ilp", "makespan"})
    EXPECT_NE(r.output.find(name), std::string::npos) << name << " in\n" << r.output;
}

TEST(PlanCp, JsonGivesTheOwnerOfEveryQueryBlockAndIsDeterministic) {
  const std::string args = "--mask packed --seq 10000 --cp 3 --query-block 100 --json";
  const Result r = loom_plan_cp(args);
  ASSERT_EQ(r.exit_code, 0);
  const nlohmann::json j = nlohmann::json::parse(r.output);
  const auto& owners = j["plans"][0]["owner"];
  ASSERT_EQ(owners.size(), 100u);
  for (const auto& o : owners) EXPECT_TRUE(o.get<int>() >= 0 && o.get<int>() < 3);
  EXPECT_EQ(loom_plan_cp(args).output, r.output);
}

TEST(PlanCp, RandomSeedDrawsTheRandomDistribution) {
  const std::string args = "--mask packed --seq 16384 --cp 4 --distribution random --json";
  const auto owners = [&](const std::string& extra) {
    const Result r = loom_plan_cp(args + extra);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return nlohmann::json::parse(r.output)["plans"][0]["owner"];
  };
  EXPECT_EQ(owners(""), owners(" --random-seed 1"));
  EXPECT_NE(owners(""), owners(" --random-seed 2"));
}

TEST(PlanCp, RandomTokensCarriesItsOwnBlocksAndTimesATrainingStep) {
  // Its blocks are the ranks' own tokens, so the plan carries their workloads (the
  // top-level ones are the mask's), and the backward walks its own rows.
  const Result r = loom_plan_cp(
      "--mask embedded --seq 4096 --cp 4 --distribution random-tokens --gpu A40 --pass "
      "training --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json plan = nlohmann::json::parse(r.output)["plans"][0];
  EXPECT_EQ(plan["distribution"], "random-tokens");
  EXPECT_EQ(plan["rank_tokens"], nlohmann::json({1024, 1024, 1024, 1024}));
  ASSERT_EQ(plan["block_workload"].size(), plan["owner"].size());
  std::int64_t total = 0;
  for (const auto& w : plan["block_workload"]) total += w.get<std::int64_t>();
  std::int64_t ranks = 0;
  for (const auto& w : plan["rank_workload"]) ranks += w.get<std::int64_t>();
  EXPECT_EQ(total, ranks);
  for (const auto& b : plan["rank_backward_s"]) EXPECT_GT(b.get<double>(), 0);
}

TEST(PlanCp, GpuAddsPerRankAttentionTimes) {
  const Result r = loom_plan_cp("--mask embedded --seq 16384 --cp 4 --gpu A40 --json");
  ASSERT_EQ(r.exit_code, 0);
  const auto times = nlohmann::json::parse(r.output)["plans"][0]["rank_attention_s"];
  ASSERT_EQ(times.size(), 4u);
  for (const auto& t : times) EXPECT_GT(t.get<double>(), 0);
  EXPECT_EQ(loom_plan_cp("--gpu A40 --heads 40 --kv-heads 7").exit_code, 2);
  EXPECT_NE(stderr_of("--gpu A40 --heads 40 --kv-heads 7").find("--kv-heads"), std::string::npos);
}

/// The first plan of `loom plan cp ARGS --json`.
nlohmann::json first_plan(const std::string& args) {
  const Result r = loom_plan_cp(args + " --json");
  EXPECT_EQ(r.exit_code, 0) << args;
  return nlohmann::json::parse(r.output)["plans"][0];
}

/// The largest of a plan's per-rank seconds under `key`.
double slowest(const nlohmann::json& plan, const char* key) {
  double m = 0;
  for (const auto& t : plan[key]) m = std::max(m, t.get<double>());
  return m;
}

/// The slowest rank's attention time of `loom plan cp ARGS --json`.
double slowest_rank_s(const std::string& args) {
  return slowest(first_plan(args), "rank_attention_s");
}

TEST(PlanCp, TrainingPassAddsTheBackwardKernels) {
  // The switch reaches the model (the unit tests pin the backward's cost): forward is the
  // default, a training step takes longer, other values and a missing --gpu exit 2.
  const std::string base = "--mask embedded --seq 16384 --cp 4 --gpu A40";
  const double forward = slowest_rank_s(base);
  EXPECT_EQ(slowest_rank_s(base + " --pass forward"), forward);
  EXPECT_GT(slowest_rank_s(base + " --pass training"), 1.5 * forward);
  EXPECT_EQ(loom_plan_cp(base + " --pass backward").exit_code, 2);
  EXPECT_NE(stderr_of(base + " --pass backward").find("--pass"), std::string::npos);
  EXPECT_EQ(loom_plan_cp("--mask embedded --seq 1024 --pass training").exit_code, 2);
  // The group's time waits at the passes' collectives: at least the slowest rank's own
  // forward and backward, at most the slowest forward plus the slowest backward.
  const nlohmann::json plan = first_plan(base + " --pass training");
  const double group = plan["attention_s"].get<double>();
  EXPECT_GE(group, slowest(plan, "rank_attention_s"));
  EXPECT_LE(group, slowest(plan, "rank_forward_s") + slowest(plan, "rank_backward_s"));
}

TEST(PlanCp, SubBlockSizeIsTheOtherReadingOfTheIntraGpuSplit) {
  const std::string base = "--mask embedded --seq 16384 --cp 4 --gpu A40";
  const double unsplit = slowest_rank_s(base + " --sub-blocks 0");
  // Sub-blocks of 128 query blocks' keys (all 16,384) never split a row.
  EXPECT_EQ(slowest_rank_s(base + " --sub-block-size 128"), unsplit);
  // Sub-blocks of 2,048 keys split the heavy rows: the kernels idle fewer CUs.
  EXPECT_LT(slowest_rank_s(base + " --sub-block-size 16"), unsplit);
  const auto split = [&](const std::string& extra) {
    return nlohmann::json::parse(loom_plan_cp(base + extra + " --json").output)["intra_gpu_split"];
  };
  EXPECT_EQ(split(" --sub-block-size 16"), "sub-blocks of 2048 keys");
  EXPECT_EQ(split(""), "16 sub-blocks per row");
  EXPECT_EQ(split(" --sub-blocks 0"), "no intra-GPU split");
  for (const std::string& bad :
       {base + " --sub-block-size 16 --sub-blocks 4", base + " --sub-block-size 16 --key-block 48",
        base + " --sub-block-size 0",
        std::string("--seq 16384 --sub-block-size 16") /* needs --gpu */}) {
    EXPECT_EQ(loom_plan_cp(bad).exit_code, 2) << bad;
    EXPECT_NE(stderr_of(bad).find("--sub-block-size"), std::string::npos) << stderr_of(bad);
  }
}

TEST(PlanCp, BadOptionsExitTwoNamingTheOption) {
  for (const auto& [args, option] : std::vector<std::pair<std::string, std::string>>{
           {"--cp 0", "--cp"},
           {"--mask diagonal", "--mask"},
           {"--distribution ring", "--distribution"},
           {"--query-block 0", "--query-block"},
           {"--key-block -3", "--key-block"},
           {"--seq 0", "--seq"},
           {"--gpu B300", "--gpu"},
           {"--modality-fraction 1.5", "--modality-fraction"},
           {"--mask packed --packed-sequences 30", "packed_sequences"},
           {"--gpu A40 --blocks-per-cu 0", "--blocks-per-cu"},
           {"--blocks-per-cu 2", "--blocks-per-cu"},  // needs --gpu
       }) {
    EXPECT_EQ(loom_plan_cp(args).exit_code, 2) << args;
    EXPECT_NE(stderr_of(args).find(option), std::string::npos) << args << ": " << stderr_of(args);
  }
}

TEST(PlanCp, MaskFileIsReadAndBadLinesAreNamed) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("loom-plan-cp-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto good = dir / "fig34.txt";
  std::ofstream(good) << "# Fig 3.4: text, text, A, A, text, text\n"
                         "0x8000000000000007\n0x8000000000000007\n2\n2\n"
                         "0x8000000000000007\n0x8000000000000007\n";
  const Result r =
      loom_plan_cp("--mask-file " + good.string() + " --query-block 2 --key-block 2 --cp 2 --json");
  ASSERT_EQ(r.exit_code, 0);
  // Rows: t0-1 see key block 0; A2-3 see block 1; t4-5 see all three.
  EXPECT_EQ(nlohmann::json::parse(r.output)["block_workload"], nlohmann::json({1, 1, 3}));
  const auto bad = dir / "bad.txt";
  std::ofstream(bad) << "1\n0xZZ\n";
  EXPECT_EQ(loom_plan_cp("--mask-file " + bad.string()).exit_code, 2);
  EXPECT_NE(stderr_of("--mask-file " + bad.string()).find("bad.txt:2"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace loom
