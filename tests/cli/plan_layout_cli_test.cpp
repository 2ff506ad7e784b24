// End-to-end tests of `loom plan layout`: the Table 4.2-style trial table, the Table
// 4.1-style layouts, byte-identical reruns, and exit 2 for a bad workload CSV.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_support.hpp"

namespace loom {
namespace {

using Result = test::CliResult;

std::string temp(const std::string& suffix) {
  return ::testing::TempDir() + "plan_layout_" +
         ::testing::UnitTest::GetInstance()->current_test_info()->name() + suffix;
}

Result plan(const std::string& args) {
  return test::run_loom("plan layout " + args, "2>" + temp(".err"));
}

std::string stderr_text() {
  std::ifstream in(temp(".err"));
  return std::string(std::istreambuf_iterator<char>(in), {});
}

const std::string kSynth =
    std::string(LOOM_SOURCE_DIR) + "/configs/paper/entrain-synthchartnet-llama3-3b.toml";

TEST(CliPlanLayout, PrintsTable42TrialsAndTheLayouts) {
  const Result r = plan(kSynth);
  ASSERT_EQ(r.exit_code, 0) << stderr_text();
  EXPECT_NE(r.output.find("k = 59"), std::string::npos);
  EXPECT_NE(r.output.find("        64  yes    8:8 "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("       256  yes    8:8 "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("         1  no "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("b_min = "), std::string::npos);
  for (const char* planner : {"entrain ", "disttrain ", "dip "})
    EXPECT_NE(r.output.find(planner), std::string::npos) << planner;
  EXPECT_EQ(plan(kSynth).output, r.output);  // deterministic
}

TEST(CliPlanLayout, JsonCarriesTheTableAndEveryPlannersLayout) {
  const Result text = plan(kSynth + " --sizes 1 64");
  const Result r = plan(kSynth + " --sizes 1 64 --json");
  ASSERT_EQ(r.exit_code, 0) << stderr_text();
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["validation_batches"], 59);
  ASSERT_EQ(j["trials"].size(), 2u);
  EXPECT_FALSE(j["trials"][0]["pass"].get<bool>());  // one sample: the allocation varies
  EXPECT_TRUE(j["trials"][1]["pass"].get<bool>());
  EXPECT_EQ(j["trials"][1]["reference"], nlohmann::json::array({8, 8}));
  EXPECT_NE(text.output.find("b_min = " + std::to_string(j["b_min"].get<int>())),
            std::string::npos);
  ASSERT_EQ(j["plans"].size(), 3u);
  for (const auto& p : j["plans"]) {
    // The text table prints the same plan's throughput, to two decimals.
    char row[32];
    std::snprintf(row, sizeof row, "%.2f", p["throughput_samples_per_s"].get<double>());
    EXPECT_NE(text.output.find(row), std::string::npos) << p["planner"] << " " << row;
    EXPECT_GT(p["iteration_time_s"].get<double>(), 0);
  }
  EXPECT_EQ(j["cost_model"]["name"], "analytical");
}

TEST(CliPlanLayout, MalformedWorkloadCsvExits2NamingTheLine) {
  const std::string csv = temp(".csv");
  std::ofstream(csv) << "sample_id,text_tokens,image_tokens\n0,10,400\n1,0,0\n";
  const Result r = plan(kSynth + " --set workload.dataset= --set workload.csv=" + csv);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(stderr_text().find(csv + ":3: sample 1 has no tokens"), std::string::npos)
      << stderr_text();
}

TEST(CliPlanLayout, EveryPlannersMemoryVerdictIsTheOneSimReaches) {
  // One memory model: a layout `plan layout` calls out of memory is the one `loom sim`
  // refuses (exit 3) under the same scheduler, and one it says fits runs (exit 0), on the
  // shipped configs and on a VLM squeezed into less and less memory (its frozen ViT keeps
  // no activations in either; DIP's scheduler waits under the cap).
  struct Case {
    std::string config;
    std::string memory;  // "" = the config's
  };
  const std::string src = std::string(LOOM_SOURCE_DIR) + "/configs/";
  const std::vector<Case> cases = {{src + "examples/vlm-frozen.toml", ""},
                                   {src + "examples/vlm-frozen.toml", "16GB"},
                                   {src + "examples/vlm-frozen.toml", "8GB"},
                                   {src + "examples/vlm-frozen.toml", "4GB"},
                                   {src + "paper/cornstarch-mmm.toml", ""},
                                   {src + "paper/entrain-chartqa-llama3-3b.toml", ""},
                                   {src + "paper/entrain-chartqa-llama3-3b.toml", "8GB"}};
  int refused = 0;
  for (const Case& c : cases) {
    const std::string set = c.memory.empty() ? "" : " --set cluster.gpu_memory=" + c.memory;
    const Result r = plan(c.config + set + " --json");
    ASSERT_EQ(r.exit_code, 0) << c.config << set << "\n" << stderr_text();
    const nlohmann::json plans = nlohmann::json::parse(r.output).at("plans");
    ASSERT_EQ(plans.size(), 3u) << r.output;
    for (const auto& p : plans) {
      const std::string planner = p.at("planner");
      const bool fits = p.at("fits_memory");
      const Result sim =
          test::run_loom("sim " + c.config + set + " --set schedule.name=" + planner +
                             " --backend evaluator --no-plot -q --out " + temp("-sim") + " --force",
                         "2>&1");
      EXPECT_EQ(sim.exit_code, fits ? 0 : 3)
          << c.config << set << " " << planner << " (plan layout: " << (fits ? "" : "does not ")
          << "fit)\n"
          << sim.output;
      refused += !fits;
    }
  }
  EXPECT_GE(refused, 4);  // the squeezed cases do refuse: the check can fail
}

// `--out` writes Entrain's layout (e.g. vision:audio:llm GPUs on the two-encoder MLLM) as
// a config `loom sim` takes back: each component on its own GPUs at the plan's TP and PP.
TEST(CliPlanLayout, OutWritesTheChosenLayoutAsAConfigSimRuns) {
  const std::string config = std::string(LOOM_SOURCE_DIR) + "/configs/paper/cornstarch-mmm.toml";
  const std::string layout = temp(".toml");
  const Result r = plan(config + " --sizes 1 --json --out " + layout);
  ASSERT_EQ(r.exit_code, 0) << stderr_text();
  const nlohmann::json entrain = nlohmann::json::parse(r.output).at("plans").at(0);
  ASSERT_EQ(entrain.at("planner"), "entrain");
  const Result sim = test::run_loom(
      "sim " + layout + " --backend evaluator --no-plot -q --out " + temp("-sim") + " --force",
      "2>&1");
  ASSERT_EQ(sim.exit_code, 0) << sim.output;
  EXPECT_NE(sim.output.find("scheduler cornstarch"), std::string::npos) << sim.output;
  const int dp = 2;  // cornstarch-mmm.toml's parallel.dp
  int first_gpu = 0;
  ASSERT_EQ(entrain.at("components").size(), 3u);
  for (const auto& c : entrain.at("components")) {
    const int tp = c.at("tp"), pp = c.at("pp"), gpus = tp * pp * dp;
    const std::string line = c.at("name").get<std::string>() + " tp " + std::to_string(tp) +
                             " cp 1 pp " + std::to_string(pp) + " dp " + std::to_string(dp) +
                             " on GPUs " + std::to_string(first_gpu) + "-" +
                             std::to_string(first_gpu + gpus - 1);
    EXPECT_NE(sim.output.find(line), std::string::npos) << line << "\n" << sim.output;
    first_gpu += gpus;
  }
  // A destination that cannot be written exits 2 and leaves nothing behind.
  EXPECT_EQ(plan(config + " --sizes 1 --out /proc/loom-no-such/layout.toml").exit_code, 2);
}

}  // namespace
}  // namespace loom
