// End-to-end tests of the `loom` binary: exit codes, error messages that name the file and
// key, byte-identical reruns, nothing half-written on failure, and the golden summary of
// the textbook example.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli_support.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

namespace fs = std::filesystem;

using Result = test::CliResult;

Result run(const std::string& args) {
  return test::run_loom(args);
}

std::string example(const std::string& name) {
  return test::source_path("configs/examples/" + name);
}

using test::slurp;

void expect_error(const std::string& args, int code, const std::vector<std::string>& mentions) {
  test::expect_exit(args, code, mentions);
}

}  // namespace

TEST(Cli, TextbookExampleReports33Milliseconds) {
  test::TempDir dir;
  const Result r =
      run("sim " + example("uniform-1f1b.toml") + " --no-plot -q --out " + dir.path("out"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("iteration time   33.000 ms"), std::string::npos) << r.output;
  const auto metrics = nlohmann::json::parse(slurp(dir.path("out") + "/metrics.json"));
  EXPECT_NEAR(metrics["iteration_time_s"].get<double>(), 0.033, 1e-12);
  EXPECT_NEAR(metrics["bubble_fraction"].get<double>(), 3.0 / 11, 1e-9);
  EXPECT_EQ(metrics["per_rank"].size(), 4u);
  for (const char* f : {"timeline.json", "timeline.csv", "memory.csv", "schedule.txt"}) {
    EXPECT_TRUE(fs::exists(dir.path("out") + "/" + f)) << f;
  }
  // The Chrome trace parses and has one complete event per operation.
  const auto trace = nlohmann::json::parse(slurp(dir.path("out") + "/timeline.json"));
  int complete = 0;
  for (const auto& e : trace["traceEvents"]) complete += e["ph"] == "X";
  EXPECT_GT(complete, 4 * 16);
}

TEST(Cli, RerunsAreByteIdentical) {
  test::TempDir dir;
  for (const char* backend : {"simgrid", "evaluator"}) {
    for (const char* out : {"a", "b"}) {
      const Result r = run("sim " + example("vlm-frozen.toml") + " -q --backend " + backend +
                           " --out " + dir.path(std::string(backend) + out));
      ASSERT_EQ(r.exit_code, 0) << r.output;
    }
    // The plots are part of the output (ctest passes the interpreter that has matplotlib).
    for (const char* png : {"gantt.png", "memory.png"}) {
      const std::string bytes = slurp(fs::path(dir.path(std::string(backend) + "a")) / png);
      EXPECT_EQ(bytes.substr(0, 8), "\x89PNG\r\n\x1a\n") << backend << ": " << png;
    }
    for (const auto& entry : fs::directory_iterator(dir.path(std::string(backend) + "a"))) {
      const fs::path twin =
          fs::path(dir.path(std::string(backend) + "b")) / entry.path().filename();
      EXPECT_EQ(slurp(entry.path()), slurp(twin)) << backend << ": " << entry.path().filename();
    }
  }
}

TEST(Cli, FrozenVlmPrintsThatTheFrozenAwarePartitionIsFaster) {
  test::TempDir dir;
  const Result r = run("sim " + example("vlm-frozen.toml") +
                       " --no-plot -q --backend evaluator --out " + dir.path("o"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("frozen-aware is faster"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("input gradients only"), std::string::npos) << r.output;
  // metrics.json's views are the evaluator's: the study's own (frozen-aware) view is the
  // run's iteration here, and SimGrid's run reports the same views, planned beside its files.
  const auto metrics_of = [&](const std::string& out) {
    return nlohmann::json::parse(slurp(dir.path(out) + "/metrics.json"));
  };
  const auto evaluator = metrics_of("o");
  const auto& v = evaluator["partition_views_evaluator_s"];
  EXPECT_DOUBLE_EQ(v["true"].get<double>(), evaluator["iteration_time_s"].get<double>());
  EXPECT_GT(v["naive"].get<double>(), v["true"].get<double>());
  const Result s = run("sim " + example("vlm-frozen.toml") +
                       " --no-plot -q --backend simgrid --out " + dir.path("s"));
  ASSERT_EQ(s.exit_code, 0) << s.output;
  EXPECT_EQ(metrics_of("s")["partition_views_evaluator_s"], v);
}

TEST(Cli, UnknownKeyNamesFileAndKey) {
  test::TempDir dir;
  expect_error("sim " + example("uniform-1f1b.toml") + " --set schedule.microbatchez=3", 2,
               {"uniform-1f1b.toml", "schedule.microbatchez", "unknown key"});
  const std::string typo = dir.write(
      "typo2.toml",
      "[[model.modules]]\nname = \"llm\"\nkind = \"llm\"\nlayers = 2\nhidden = 64\nhiden = 3\n");
  expect_error("sim " + typo, 2, {"typo2.toml:6", "model.modules.llm.hiden", "unknown key"});
}

TEST(Cli, SelectiveRecomputeUnderFlashAttentionSaysItSavesNothing) {
  // Valid, so exit 0, but said once: FlashAttention keeps no scores for it to drop.
  const std::string config = test::source_path("validation/megatron-narayanan-2021/n1-1.7b.toml");
  const Result flash =
      run("config " + config + " --set cost.attention=flash --set cost.recompute=selective");
  EXPECT_EQ(flash.exit_code, 0) << flash.output;
  EXPECT_NE(flash.output.find("loom: warning: " + config +
                              ": selective recompute under cost.attention = \"flash\" saves no "
                              "memory"),
            std::string::npos)
      << flash.output;
  EXPECT_NE(flash.output.find("use recompute = \"full\""), std::string::npos);
  // Unfused attention (the file's) is what selective recompute is for: no note.
  const Result unfused = run("config " + config + " --set cost.recompute=selective");
  EXPECT_EQ(unfused.output.find("warning"), std::string::npos) << unfused.output;
  // Other submodules save memory under flash too: no note.
  const Result modules = run("config " + config +
                             " --set cost.attention=flash --set cost.recompute=selective"
                             " --set 'cost.recompute_modules=[\"core_attn\", \"mlp\"]'");
  EXPECT_EQ(modules.output.find("warning"), std::string::npos) << modules.output;
  // A list without selective recompute is ignored, as Megatron ignores it, and said so.
  const Result ignored = run("config " + config + " --set 'cost.recompute_modules=[\"mlp\"]'");
  EXPECT_EQ(ignored.exit_code, 0) << ignored.output;
  EXPECT_NE(ignored.output.find("cost.recompute_modules applies to selective recompute only, "
                                "and cost.recompute is \"full\": the list is ignored"),
            std::string::npos)
      << ignored.output;
}

TEST(Cli, WrongTypeNamesTheKey) {
  expect_error("sim " + example("uniform-1f1b.toml") + " --set schedule.microbatches=eight", 2,
               {"schedule.microbatches", "expected an integer"});
  expect_error("sim " + example("uniform-1f1b.toml") + " --set cluster.intra_node.latency=fast", 2,
               {"cluster.intra_node.latency", "quantity"});
}

TEST(Cli, ZeroOrNegativeSizesAreRejected) {
  expect_error("sim " + example("uniform-1f1b.toml") + " --set parallel.pp=0", 2,
               {"parallel.pp", "from 1 to"});
  expect_error("sim " + example("uniform-1f1b.toml") + " --set model.modules.llm.hidden=-64", 2,
               {"model.modules.llm.hidden", "from 1 to"});
  expect_error("sim " + example("uniform-1f1b.toml") + " --set cluster.intra_node.bandwidth=0", 2,
               {"cluster.intra_node.bandwidth", "> 0"});
}

TEST(Cli, NonFiniteAndHugeValuesAreRejected) {
  const std::string sim = "sim " + example("uniform-1f1b.toml") + " --no-plot -q";
  expect_error(sim + " --set cost.table.llm.forward=nan", 2, {"cost.table.llm.forward", "finite"});
  expect_error(sim + " --set cost.table.llm.forward=inf", 2, {"cost.table.llm.forward", "finite"});
  expect_error(sim + " --set 'cluster.inter_node.bandwidth=\"infGBps\"'", 2,
               {"cluster.inter_node.bandwidth"});
  expect_error(sim + " --set cost.table.llm.parameters=-1", 2,
               {"cost.table.llm.parameters", ">= 0"});
  expect_error(sim + " --set cluster.nodes=100000 --set cluster.gpus_per_node=1000", 2,
               {"cluster.nodes", "more than Loom models"});
}

TEST(Cli, BooleanLookingChoicesTakeTheWord) {
  test::TempDir dir;
  const Result r =
      run("sim " + example("vlm-frozen.toml") +
          " --no-plot -q --backend evaluator --set schedule.partition_view=naive --out " +
          dir.path("n"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Result t =
      run("sim " + example("vlm-frozen.toml") +
          " --no-plot -q --backend evaluator --set schedule.partition_view=true --out " +
          dir.path("t"));
  ASSERT_EQ(t.exit_code, 0) << t.output;
  EXPECT_EQ(nlohmann::json::parse(slurp(dir.path("t") + "/metrics.json"))["partition_view"],
            "true");
}

TEST(Cli, MoreStagesThanLayers) {
  expect_error(
      "sim " + example("uniform-1f1b.toml") + " --set parallel.pp=9 --set cluster.gpus_per_node=16",
      2, {"parallel.pp", "9 pipeline stages", "8 layers"});
}

TEST(Cli, InterleavedGroupAndRoundRulesAreExitTwoWithTheNearestValidValue) {
  const std::string base =
      "config " + example("uniform-1f1b.toml") +
      " --set schedule.interleaved-1f1b.chunks=2 --set schedule.interleaved-zb.chunks=2";
  // Megatron: the last group (6 mod 4 = 2) must be 0 or >= pp.
  expect_error(base + " --set schedule.name=interleaved-1f1b --set schedule.microbatches=6", 2,
               {"schedule.microbatches: interleaved-1f1b", "last group of 2 < parallel.pp = 4",
                "use schedule.microbatches = 4 (or 8), or "
                "schedule.interleaved-1f1b.microbatch_group_size = 6"});
  expect_error(base + " --set schedule.name=interleaved-1f1b --set schedule.microbatches=3", 2,
               {"needs at least parallel.pp = 4", "use schedule.microbatches = 4"});
  expect_error(base +
                   " --set schedule.name=interleaved-1f1b --set "
                   "schedule.interleaved-1f1b.microbatch_group_size=3",
               2,
               {"schedule.interleaved-1f1b.microbatch_group_size: must be from parallel.pp = 4",
                "got 3; use 4"});
  // PyTorch: 9 on 4 ranks is 2 rounds of 4.5.
  expect_error(base + " --set schedule.name=interleaved-zb --set schedule.microbatches=9", 2,
               {"schedule.microbatches: interleaved-zb", "use schedule.microbatches = 8 (or 10)"});
  // Valid: Megatron's groups of 6 for m = 6, PyTorch's one round of 6.
  EXPECT_EQ(run(base + " --set schedule.name=interleaved-1f1b --set schedule.microbatches=6 "
                       "--set schedule.interleaved-1f1b.microbatch_group_size=6")
                .exit_code,
            0);
  EXPECT_EQ(
      run(base + " --set schedule.name=interleaved-zb --set schedule.microbatches=6").exit_code, 0);
}

TEST(Cli, LayoutsThatDoNotFitAreInfeasible) {
  test::TempDir dir;
  expect_error("sim " + example("vlm-frozen.toml") + " --set cluster.gpu_memory=2GB --out " +
                   dir.path("oom"),
               3, {"out of memory", "rank"});
  EXPECT_FALSE(fs::exists(dir.path("oom")));  // nothing half-written
  // The message names the keys that shrink the largest part, skipping those applied:
  // activations here (no recompute yet, the table-free analytical model: full only).
  expect_error("sim " + example("vlm-frozen.toml") + " --set cluster.gpu_memory=2GB", 3,
               {"activations of 2 live microbatches",
                "try cost.recompute = \"full\", a smaller "
                "schedule.microbatch_size"});
  // Optimizer state of a TP 8 x DP 32 run already recomputing: the distributed optimizer
  // first, sequence parallelism among the rest, no recompute.
  const auto big =
      run("sim " + test::source_path("validation/megatron-narayanan-2021/n1-18.4b.toml") +
          " --backend evaluator --set cluster.gpu_memory=10GB");
  EXPECT_EQ(big.exit_code, 3);
  EXPECT_NE(big.output.find("try parallel.distributed_optimizer = true (the optimizer state over "
                            "32 replicas)"),
            std::string::npos)
      << big.output;
  EXPECT_NE(big.output.find("parallel.sequence_parallel = true"), std::string::npos);
  EXPECT_EQ(big.output.find("cost.recompute"), std::string::npos) << "already full";
  expect_error("sim " + example("uniform-1f1b.toml") + " --set parallel.dp=4", 3,
               {"GPUs", "the cluster has 8"});
}

TEST(Cli, MalformedWorkloadCsvNamesTheLine) {
  test::TempDir dir;
  const std::string csv =
      dir.write("samples.csv", "sample_id,text_tokens,vision_tokens\n0,1024,4600\n1,10x,4600\n");
  expect_error("sim " + example("vlm-frozen.toml") + " --set workload.csv=" + csv, 2,
               {"samples.csv:3", "text_tokens"});
  const std::string short_csv =
      dir.write("short.csv", "sample_id,text_tokens,vision_tokens\n0,1024,4600\n");
  expect_error("sim " + example("vlm-frozen.toml") + " --set workload.csv=" + short_csv, 2,
               {"short.csv", "needs"});
  // A misspelt modality would leave the encoder with no tokens: it is an error.
  const std::string misspelt =
      dir.write("img.csv", "sample_id,text_tokens,img_tokens\n0,1024,4600\n");
  expect_error("sim " + example("vlm-frozen.toml") + " --set workload.csv=" + misspelt, 2,
               {"img.csv:1", "img_tokens", "no module reads"});
  const std::string huge =
      dir.write("huge.csv", "sample_id,text_tokens,vision_tokens\n0,3000000000,4600\n");
  expect_error("sim " + example("vlm-frozen.toml") + " --set workload.csv=" + huge, 2,
               {"huge.csv:2", "more than"});
  expect_error("sim " + example("vlm-frozen.toml") + " --set workload.tokens.img=4600", 2,
               {"workload.tokens.img", "no module reads"});
}

TEST(Cli, WorkloadPathsAreRelativeToTheConfig) {
  test::TempDir dir;
  std::ifstream in(example("vlm-frozen.toml"));
  std::string config((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  config.replace(config.find("tokens = {"), std::string("tokens = {").size(),
                 "csv = \"data/samples.csv\"\n# tokens = {");
  fs::create_directories(dir.path("study/data"));
  std::string rows = "sample_id,text_tokens,vision_tokens\n";
  for (int i = 0; i < 16; ++i) rows += std::to_string(i) + ",1024,4600\n";
  dir.write("study/data/samples.csv", rows);
  const std::string toml = dir.write("study/vlm.toml", config);
  const Result r = run("sim " + toml + " --backend evaluator --no-plot -q --out " + dir.path("o"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST(Cli, SyntaxErrorsAndUnknownSchedulers) {
  test::TempDir dir;
  const std::string bad = dir.write("bad.toml", "[parallel\npp = 2\n");
  expect_error("sim " + bad, 2, {"bad.toml:1", "syntax"});
  expect_error("sim " + example("uniform-1f1b.toml") + " --set schedule.name=zigzag", 2,
               {"schedule.name", "zigzag", "gpipe", "1f1b"});
  expect_error("sim /nonexistent.toml", 2, {"nonexistent.toml"});
}

TEST(Cli, SchedulersNamePrintsItsOptionsWithDefaults) {
  const Result r = run("schedulers interleaved-1f1b");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* line :
       {"options (write them under [schedule.interleaved-1f1b]", "chunks = 1   (an integer >= 1)",
        "microbatch_group_size = 0   (an integer >= 0)",
        "earlier releases: schedule.chunks (deprecated)"})
    EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
  const Result dip = run("schedulers dip");
  EXPECT_NE(dip.output.find("search_iterations = 50"), std::string::npos) << dip.output;
  EXPECT_NE(dip.output.find("earlier releases: schedule.dip_search_iterations"), std::string::npos)
      << dip.output;
  EXPECT_NE(run("schedulers gpipe").output.find("options: none"), std::string::npos);
  EXPECT_NE(run("schedulers 1f1b").output.find("overlap_moe_a2a = false"), std::string::npos);
  expect_error("schedulers zbv", 2, {"unknown scheduler 'zbv'", "did you mean 'zb-v'?"});
}

TEST(Cli, SchedulerTablesApplyToTheirSchedulerAndFlatKeysWarn) {
  // interleaved-1f1b's chunks no longer make 1f1b and zb-v "not applicable" side by side.
  const Result r = run("sim " + example("uniform-1f1b.toml") +
                       " --backend evaluator --schedulers interleaved-1f1b,1f1b,zb-v"
                       " --set schedule.interleaved-1f1b.chunks=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("not applicable"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("warning"), std::string::npos) << r.output;
  // The flat key of earlier releases still runs, and says what to write instead.
  test::TempDir dir;
  const Result flat = run("sim " + example("uniform-1f1b.toml") + " --out " + dir.path("flat") +
                          " --backend evaluator --set schedule.name=looped-bfs"
                          " --set schedule.chunks=2");
  ASSERT_EQ(flat.exit_code, 0) << flat.output;
  EXPECT_NE(flat.output.find("loom: warning: "), std::string::npos) << flat.output;
  EXPECT_NE(flat.output.find("schedule.chunks is deprecated"), std::string::npos) << flat.output;
  EXPECT_NE(flat.output.find("[schedule.looped-bfs] chunks = 2"), std::string::npos) << flat.output;
  expect_error("sim " + example("uniform-1f1b.toml") + " --set schedule.cornstarch.modality=auto",
               2,
               {"key 'schedule.cornstarch.modality'", "cornstarch has no option 'modality'",
                "loom schedulers cornstarch"});
  expect_error("sim " + example("uniform-1f1b.toml") + " --set schedule.chunk=2", 2,
               {"key 'schedule.chunk': unknown key", "did you mean 'chunks'?"});
}

TEST(Cli, ConfigDumpListsResolvedDefaults) {
  const Result r =
      run("config " + example("uniform-1f1b.toml") + " --set schedule.microbatches=16");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[schedule]"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("microbatches = 16"), std::string::npos) << r.output;
  // A default the file does not set (cost.efficiency is only dumped when set: unset
  // selects the kernel-level model).
  EXPECT_NE(r.output.find("recompute = 'none'"), std::string::npos) << r.output;
}

TEST(Cli, SimGridSettingsPassThroughAndBadOnesAreInputErrors) {
  test::TempDir dir;
  const std::string base =
      "sim " + example("uniform-1f1b.toml") + " --no-plot -q --force --out " + dir.path("o");
  // Communication is free in this example, so a valid network setting leaves 33 ms.
  const Result ok = run(base + " --simgrid-cfg network/TCP-gamma:4194304");
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_NE(ok.output.find("33.000 ms"), std::string::npos) << ok.output;
  expect_error(base + " --simgrid-cfg foo", 2, {"expected KEY:VALUE"});
  expect_error(base + " --simgrid-cfg network/bogus:1", 2,
               {"--simgrid-cfg 'network/bogus:1'", "Bad config key"});
}

}  // namespace loom
