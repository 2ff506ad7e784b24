// `loom validate` against the published Megatron-LM runs, `loom cost`, and the cost-model
// keys' bad-input messages.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_support.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

const std::string kNarayanan = "validation/megatron-narayanan-2021";

std::string example() {
  return test::source_path("configs/examples/uniform-1f1b.toml");
}

nlohmann::json json_of(const test::CliResult& r) {
  const auto start = r.output.find('{');
  EXPECT_NE(start, std::string::npos) << r.output;
  return nlohmann::json::parse(r.output.substr(start));
}

/// `loom validate <dir> --backend evaluator --json --quiet`, parsed (a failure on a
/// nonzero exit).
nlohmann::json validate_on_evaluator(const std::string& dir) {
  const auto r = test::run_loom("validate " + dir + " --backend evaluator --json --quiet");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return json_of(r);
}

/// A folder of validation runs copied from validation/<set>/<run>.toml.
std::string validation_set(const test::TempDir& dir, const std::vector<std::string>& runs) {
  std::filesystem::create_directories(dir.path("set"));
  for (const std::string& run : runs)
    std::filesystem::copy_file(test::source_path("validation/" + run + ".toml"),
                               dir.path("set/" + run.substr(run.find('/') + 1) + ".toml"));
  return dir.path("set");
}

TEST(Validate, NarayananRunsWithinTheErrorBudgetOnTheEvaluator) {
  const nlohmann::json j = validate_on_evaluator(test::source_path(kNarayanan));
  ASSERT_EQ(j["runs"].size(), 16u);
  const auto& s = j["summary"]["evaluator"];
  // Issue 13's budget on published runs no constant was fitted to.
  EXPECT_LE(s["mean_abs_error_pct"].get<double>(), 5.0) << j.dump(1);
  EXPECT_LE(s["max_abs_error_pct"].get<double>(), 10.0) << j.dump(1);
  // Measured and predicted model TFLOP/s per GPU: one FLOP count over each time. N1-1.7B
  // (24 layers, h 2304, ffn 9216, vocab 51200, 512 x 2048 tokens, causal) by Megatron's
  // closed form 12 L h^2 ((1 + 1 + s/2h) + ffn/h + V/(2 L h)) per token.
  for (const auto& run : j["runs"]) {
    const double flops = run["model_flops_per_iteration"];
    const double seconds = run["measured_s"], gpus = run["gpus"];
    EXPECT_NEAR(run["measured_tflops_per_gpu"].get<double>(), flops / seconds / gpus / 1e12, 1e-9);
    const double predicted = run["predicted_s"]["evaluator"];
    EXPECT_NEAR(run["predicted_tflops_per_gpu"]["evaluator"].get<double>(),
                flops / predicted / gpus / 1e12, 1e-9);
    if (run["run"] != "n1-1.7b") continue;
    const double L = 24, h = 2304, ffn = 9216, V = 51200, tokens = 512.0 * 2048;
    EXPECT_NEAR(
        flops / (tokens * 12 * L * h * h * ((2 + 2048 / (2 * h)) + ffn / h + V / (2 * L * h))), 1.0,
        1e-12);
  }
}

TEST(Validate, SimPrintsModelTflopsAndMfuOnAValidationConfig) {
  test::TempDir dir;
  const auto r = test::run_loom("sim " + test::source_path(kNarayanan + "/n1-1.7b.toml") +
                                " --backend evaluator --no-plot -q --out " + dir.path("o"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("TFLOP/s per GPU, MFU "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("% of 312 TFLOP/s"), std::string::npos) << r.output;  // A100 bf16
  const nlohmann::json m = nlohmann::json::parse(test::slurp(dir.path("o") + "/metrics.json"));
  EXPECT_EQ(m["gpus"], 32);
  EXPECT_GT(m["mfu"].get<double>(), 0.2);
  EXPECT_LT(m["mfu"].get<double>(), 0.7);
  EXPECT_NEAR(m["tflops_per_gpu"].get<double>(),
              m["model_flops_per_iteration"].get<double>() / m["iteration_time_s"].get<double>() /
                  32 / 1e12,
              1e-9);
}

TEST(Validate, MegatronBridgeDenseRowsHoldTheAccuracyTheModelReachesToday) {
  // The five dense Megatron-Bridge 25.11 rows (validation/megatron-bridge-2511/README.md).
  // Issue 48's budget is 5 % mean / 10 % max; the model reaches 9.3 % / 16.3 % (2026-12-05,
  // every row fast; 7.0 % / 11.9 % before the configs took the recipes' bf16 gradients, whose
  // fp32 reduce-scatter had been exposed at 405B B200's optimizer step), and this holds it
  // there so a change that loses accuracy fails.
  test::TempDir dir;
  const std::string b = "megatron-bridge-2511/";
  const nlohmann::json j = validate_on_evaluator(
      validation_set(dir, {b + "llama3-8b-h100", b + "llama3-70b-h100", b + "llama3-8b-b200",
                           b + "llama31-405b-h100", b + "llama31-405b-b200"}));
  ASSERT_EQ(j["runs"].size(), 5u);
  const auto& s = j["summary"]["evaluator"];
  EXPECT_LE(s["mean_abs_error_pct"].get<double>(), 10.0) << j.dump(1);
  EXPECT_LE(s["max_abs_error_pct"].get<double>(), 17.0) << j.dump(1);
}

TEST(Validate, APublishedRunLoomCannotFitIsListedAndLeftOutOfTheMeans) {
  // GPT-OSS 120B as the Megatron-Bridge table states its H100 row (MBS 4 at PP 4, no
  // recompute) needs more than an H100's memory in Loom's model: a row of its own kind.
  test::TempDir dir;
  const std::string set = validation_set(
      dir, {"megatron-narayanan-2021/n1-1.7b", "megatron-bridge-2511/gpt-oss-120b-h100"});
  const nlohmann::json j = validate_on_evaluator(set);
  ASSERT_EQ(j["runs"].size(), 2u);
  const auto& oss = j["runs"][0];
  EXPECT_EQ(oss["run"], "gpt-oss-120b-h100");
  EXPECT_NE(oss["infeasible"].get<std::string>().find("out of memory: rank 0"), std::string::npos);
  EXPECT_FALSE(oss.contains("predicted_s"));
  EXPECT_EQ(j["summary"]["evaluator"]["runs"], 1);
  EXPECT_EQ(j["summary"]["evaluator"]["infeasible_runs"], 1);
  EXPECT_TRUE(j["runs"][1].contains("error_pct"));
  const auto text = test::run_loom("validate " + set + " --backend evaluator --quiet");
  EXPECT_NE(text.output.find("over 1 runs"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("gpt-oss-120b-h100: infeasible as stated, left out of the means"),
            std::string::npos)
      << text.output;
}

TEST(Validate, AFolderWithoutValidationRunsIsAnError) {
  test::expect_exit("validate " + test::source_path("configs/examples"), 2, {"[validation]"});
  test::expect_exit("validate /nonexistent-folder", 2, {"not a folder"});
}

TEST(Cost, ListsTheKernelsOfALayerAndTheIteration) {
  const auto r =
      test::run_loom("cost " + test::source_path(kNarayanan + "/n1-1.7b.toml") + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = json_of(r);
  std::string names;
  for (const auto& k : j["kernels"]) names += k["name"].get<std::string>() + ";";
  for (const char* k : {"qkv", "attention scores", "softmax", "mlp fc1", "mlp fc2 wgrad"})
    EXPECT_NE(names.find(k), std::string::npos) << k << " in " << names;
  EXPECT_GT(j["iteration"]["compute_s"].get<double>(), 0);
  EXPECT_GT(j["iteration"]["dp_allreduce_s"].get<double>(), 0);
  EXPECT_GT(j["iteration"]["compute_split_s"]["recompute"].get<double>(), 0);
  // The iteration's model TFLOP/s per GPU and MFU, as loom sim reports them (A100: 312).
  const double tflops = j["iteration"]["tflops_per_gpu"];
  EXPECT_GT(tflops, 50);
  EXPECT_NEAR(j["iteration"]["mfu"].get<double>(), tflops / 312, 1e-9);
}

TEST(Cost, IdenticalReplicasDoNotWaitForEachOtherTheTiedEmbeddingDoes) {
  // N1-39.1B (TP 8 x PP 2 x DP 32, tied embedding): the busiest rank is the last stage; at
  // the end it waits for the first stage at the embedding's all-reduce, never for its
  // identical data-parallel replicas (issue 47: this was "waiting for slower members").
  const auto r =
      test::run_loom("cost " + test::source_path(kNarayanan + "/n1-39.1b.toml") + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json dp = json_of(r)["iteration"]["data_parallel"];
  EXPECT_EQ(dp["wait_for_members_s"].get<double>(), 0.0) << dp;
  EXPECT_GT(dp["wait_for_other_stage_s"].get<double>(), 0.1) << dp;
}

TEST(Cost, SplitsCommunicationIntoExposedAndHidden) {
  // A pipelined, tensor-parallel run: waits add up to their parts, the DP all-reduce is
  // exposed (one bucket after the last backward), and turning on TP overlap moves TP
  // communication from the rank's compute to hidden without changing the kernels.
  const std::string config = test::source_path(kNarayanan + "/n2-530b-560.toml");
  const nlohmann::json plain = json_of(test::run_loom("cost " + config + " --json"));
  const nlohmann::json overlap =
      json_of(test::run_loom("cost " + config + " --set cost.tp_comm_overlap=true --json"));
  for (const nlohmann::json* j : {&plain, &overlap}) {
    const auto& it = (*j)["iteration"];
    EXPECT_NEAR(it["pipeline"]["bubble_s"].get<double>() +
                    it["pipeline"]["exposed_transfer_s"].get<double>(),
                it["pipeline_wait_s"].get<double>(), 1e-9);
    EXPECT_GT(it["pipeline"]["hidden_transfer_s"].get<double>(), 0);
    EXPECT_NEAR(it["data_parallel"]["wait_for_members_s"].get<double>() +
                    it["data_parallel"]["wait_for_other_stage_s"].get<double>() +
                    it["data_parallel"]["exposed_allreduce_s"].get<double>(),
                it["dp_allreduce_s"].get<double>(), 1e-9);
    EXPECT_EQ(it["data_parallel"]["hidden_allreduce_s"].get<double>(), 0);
  }
  EXPECT_GT(plain["iteration"]["compute_split_s"]["tp_communication"].get<double>(), 0);
  EXPECT_EQ(plain["iteration"]["tp_communication_hidden_s"].get<double>(), 0);
  EXPECT_GT(overlap["iteration"]["tp_communication_hidden_s"].get<double>(), 0);
  EXPECT_LT(overlap["iteration"]["compute_split_s"]["tp_communication"].get<double>(),
            plain["iteration"]["compute_split_s"]["tp_communication"].get<double>());
  EXPECT_LT(overlap["iteration"]["compute_s"].get<double>(),
            plain["iteration"]["compute_s"].get<double>());
}

TEST(Cost, OverlappedGradientBucketsAreMostlyHidden) {
  // parallel.overlap_grad_reduce on 32 replicas: the buckets run behind the last
  // microbatch's backward; what still runs at the optimizer step is exposed.
  const std::string config = test::source_path(kNarayanan + "/n1-18.4b.toml");
  const nlohmann::json plain = json_of(test::run_loom("cost " + config + " --json"));
  const nlohmann::json overlap =
      json_of(test::run_loom("cost " + config + " --set parallel.overlap_grad_reduce=true --json"));
  const auto& p = plain["iteration"]["data_parallel"];
  const auto& o = overlap["iteration"]["data_parallel"];
  EXPECT_GT(o["hidden_allreduce_s"].get<double>(), 0);
  EXPECT_LT(o["exposed_allreduce_s"].get<double>(), p["exposed_allreduce_s"].get<double>());
  EXPECT_NEAR(o["wait_for_members_s"].get<double>() + o["exposed_allreduce_s"].get<double>(),
              overlap["iteration"]["dp_allreduce_s"].get<double>(), 1e-9);
  EXPECT_LT(overlap["iteration"]["iteration_s"].get<double>(),
            plain["iteration"]["iteration_s"].get<double>());
  test::expect_exit("sim " + config + " --set parallel.grad_bucket_size=-1", 2,
                    {"parallel.grad_bucket_size", ">= 0"});
  // Replicas with different samples: a bucket waits for the slower replica's backward.
  // That wait is waiting for members, never negative hidden time.
  const nlohmann::json uneven = json_of(
      test::run_loom("cost " + test::source_path("configs/paper/entrain-cocoqa-llama3-1b.toml") +
                     " --set schedule.name=1f1b --set parallel.overlap_grad_reduce=true --json"));
  const auto& u = uneven["iteration"]["data_parallel"];
  EXPECT_GT(u["wait_for_members_s"].get<double>(), 0);
  EXPECT_GE(u["hidden_allreduce_s"].get<double>(), 0);
  EXPECT_NEAR(u["wait_for_members_s"].get<double>() + u["exposed_allreduce_s"].get<double>(),
              uneven["iteration"]["dp_allreduce_s"].get<double>(), 1e-9);
}

TEST(Cost, OverlapWhereItCannotApplyIsAWarningNotSilence) {
  test::TempDir dir;
  const auto hetero = test::run_loom(
      "sim " + test::source_path("configs/paper/hetero-llava-noncolocated.toml") +
      " --set parallel.overlap_grad_reduce=true --backend evaluator --no-plot --out " +
      dir.path("hetero"));
  ASSERT_EQ(hetero.exit_code, 0) << hetero.output;
  EXPECT_NE(hetero.output.find("warning: parallel.overlap_grad_reduce has no effect here: "
                               "hetero-noncolocated reduces each stage over its own copies"),
            std::string::npos)
      << hetero.output;
  const auto megatron = test::run_loom(
      "sim " + test::source_path(kNarayanan + "/n1-18.4b.toml") +
      " --set parallel.overlap_grad_reduce=true --backend evaluator --no-plot --out " +
      dir.path("megatron"));
  ASSERT_EQ(megatron.exit_code, 0) << megatron.output;
  EXPECT_EQ(megatron.output.find("warning"), std::string::npos) << megatron.output;
}

TEST(CostKeys, BadInputNamesTheKeyAndTheFix) {
  test::expect_exit("sim " + example() + " --set cost.model=analytical --set parallel.tp=3", 2,
                    {"parallel.tp", "divide"});
  test::expect_exit("sim " + example() + " --set parallel.sequence_parallel=true", 2,
                    {"parallel.sequence_parallel", "parallel.tp"});
  test::expect_exit("sim " + example() + " --set model.modules.llm.vocab=0", 2, {"vocab", ">= 1"});
  test::expect_exit("sim " + example() + " --set cost.activation_checkpointing=true", 2,
                    {"cost.recompute"});
  test::expect_exit("sim " + example() + " --set cluster.gpu=A100", 2, {"A100-80GB"});
  test::expect_exit("sim " + example() +
                        " --set cost.model=analytical --set cluster.gpu=V100-32GB"
                        " --set model.modules.llm.dtype=fp32",
                    2, {"cluster.gpu", "TF32"});
  test::expect_exit("sim " + example() + " --set cost.recompute=selective", 2,
                    {"cost.recompute", "kernel-level"});
  test::expect_exit("sim " + example() + " --set cost.model=analytical --set cost.efficiency=1.5",
                    2, {"cost.efficiency", "kernel-level"});
}

TEST(CostKeys, EfficiencyZeroNamesTheKernelLevelModel) {
  // A config that prices FLOPs at a fixed fraction switches back with
  // `--set cost.efficiency=0`: the same schedule as leaving the key out.
  const auto kernel_level = test::megatron_gpt();
  ASSERT_EQ(kernel_level->config.cost.efficiency, 0);
  EXPECT_EQ(test::megatron_gpt({"cost.efficiency=0"})->schedule, kernel_level->schedule);
  EXPECT_NE(test::megatron_gpt({"cost.efficiency=0.5"})->schedule, kernel_level->schedule);
}

}  // namespace
}  // namespace loom
