// End-to-end tests of `loom plan layout`: the Table 4.2-style trial table, the Table
// 4.1-style layouts, byte-identical reruns, and exit 2 for a bad workload CSV.
#include <gtest/gtest.h>

#include <fstream>

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

TEST(CliPlanLayout, MalformedWorkloadCsvExits2NamingTheLine) {
  const std::string csv = temp(".csv");
  std::ofstream(csv) << "sample_id,text_tokens,image_tokens\n0,10,400\n1,0,0\n";
  const Result r = plan(kSynth + " --set workload.dataset= --set workload.csv=" + csv);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(stderr_text().find(csv + ":3: sample 1 has no tokens"), std::string::npos)
      << stderr_text();
}

}  // namespace
}  // namespace loom
