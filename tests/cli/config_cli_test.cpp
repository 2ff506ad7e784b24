// `loom --version` and `loom config`: the resolved configuration is a TOML document that
// `loom sim` reads back to byte-identical results.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "cli_support.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

namespace fs = std::filesystem;

/// The file's bytes without the lines naming the config file (metrics.json's "config").
std::string without_config_path(const fs::path& p) {
  std::istringstream in(test::slurp(p));
  std::string out;
  for (std::string line; std::getline(in, line);)
    if (line.find("\"config\":") == std::string::npos) out += line + "\n";
  return out;
}

/// Every file of `a` and `b` is the same, apart from the config file's name.
void expect_same_outputs(const fs::path& a, const fs::path& b, const std::string& what) {
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(a)) {
    ++files;
    const fs::path other = b / e.path().filename();
    ASSERT_TRUE(fs::exists(other)) << what << ": " << other;
    EXPECT_EQ(without_config_path(e.path()), without_config_path(other))
        << what << ": " << e.path().filename();
  }
  EXPECT_EQ(files, static_cast<size_t>(std::distance(fs::directory_iterator(b), {}))) << what;
  EXPECT_GE(files, 5u) << what;
}

/// `loom config CONFIG ARGS` saved in another directory, then `loom sim` of both.
void expect_round_trip(const std::string& config, const std::string& args,
                       const std::string& backend) {
  const test::TempDir dir;
  const test::CliResult dump = test::run_loom("config " + config + " " + args, "2>/dev/null");
  ASSERT_EQ(dump.exit_code, 0) << config << "\n" << dump.output;
  fs::create_directories(dir.path("elsewhere"));
  const std::string resolved = dir.write("elsewhere/resolved.toml", dump.output);
  const std::string sim = " --backend " + backend + " --no-plot -q --out ";
  const test::CliResult a = test::run_loom("sim " + config + " " + args + sim + dir.path("a"));
  ASSERT_EQ(a.exit_code, 0) << config << "\n" << a.output;
  const test::CliResult b = test::run_loom("sim " + resolved + sim + dir.path("b"));
  ASSERT_EQ(b.exit_code, 0) << config << "\n" << b.output << "\n" << dump.output;
  expect_same_outputs(dir.path("a"), dir.path("b"), config + " " + args);
  // The dump is a fixed point: dumping the dump gives the same document (but its name).
  const test::CliResult again = test::run_loom("config " + resolved, "2>/dev/null");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  const auto body = [](const std::string& s) { return s.substr(s.find('\n')); };
  EXPECT_EQ(body(again.output), body(dump.output)) << config;
}

}  // namespace

TEST(ConfigCli, VersionNamesTheRelease) {
  const test::CliResult r = test::run_loom("--version");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("loom ", 0), 0u) << r.output;
  EXPECT_NE(r.output.find("SimGrid"), std::string::npos) << r.output;
}

TEST(ConfigCli, ResolvedConfigIsTomlThatSimReadsBackToIdenticalResults) {
  // The table cost model, a frozen VLM, two encoders, per-module layouts, a generated
  // dataset workload and an Oobleck GPT-3: each through the evaluator.
  for (const char* config :
       {"configs/examples/uniform-1f1b.toml", "configs/examples/vlm-frozen.toml",
        "tests/data/two-encoders.toml", "configs/paper/hetero-llava-noncolocated.toml",
        "configs/paper/entrain-cocoqa-llama3-1b.toml", "configs/paper/oobleck-gpt3-350m.toml"}) {
    expect_round_trip(test::source_path(config), "", "evaluator");
  }
  // --set overrides are part of the resolved document; SimGrid reads it back alike.
  expect_round_trip(test::source_path("configs/examples/vlm-frozen.toml"),
                    "--set schedule.microbatches=4 --set cluster.inter_node.latency=1.5e-7",
                    "simgrid");
  // A Megatron layout string, resolved stage by stage, and FSDP's per-step gathering.
  expect_round_trip(test::source_path("validation/megatron-narayanan-2021/n1-145.6b.toml"),
                    "--set 'schedule.stage_layers=[]' --set "
                    "'schedule.layout=\"Et*9|(t*10|)*6t*11L\"' --set parallel.dp=1 --set "
                    "schedule.microbatches=8",
                    "evaluator");
  expect_round_trip(test::source_path("validation/megatron-narayanan-2021/n1-39.1b.toml"),
                    "--set parallel.fsdp=true --set parallel.dp=2 --set cluster.nodes=4 --set "
                    "schedule.microbatches=4",
                    "evaluator");
}

TEST(ConfigCli, ResolvedWorkloadCsvIsAnAbsolutePath) {
  // The config names its CSV relative to itself; the dump, saved anywhere, still finds it.
  // (Not under this test's TempDir: expect_round_trip makes, and removes, that one.)
  const fs::path study =
      fs::temp_directory_path() / ("loom-test-csv-study-" + std::to_string(::getpid()));
  fs::create_directories(study / "data");
  std::ifstream in(test::source_path("configs/examples/vlm-frozen.toml"));
  std::string config((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  config.replace(config.find("tokens = {"), std::string("tokens = {").size(),
                 "csv = \"data/samples.csv\"\n# tokens = {");
  std::string rows = "sample_id,text_tokens,vision_tokens\n";
  for (int i = 0; i < 16; ++i)
    rows += std::to_string(i) + "," + std::to_string(900 + i) + ",4600\n";
  std::ofstream(study / "data/samples.csv") << rows;
  std::ofstream(study / "vlm.toml") << config;
  expect_round_trip((study / "vlm.toml").string(), "", "evaluator");
  fs::remove_all(study);
}

}  // namespace loom
