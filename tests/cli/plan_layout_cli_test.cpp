// End-to-end tests of `loom plan layout`: the Table 4.2-style trial table, the Table
// 4.1-style layouts, byte-identical reruns, and exit 2 for a bad workload CSV.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>

namespace loom {
namespace {

struct Result {
  int exit_code = -1;
  std::string out;
};

std::string temp(const std::string& suffix) {
  return ::testing::TempDir() + "plan_layout_" +
         ::testing::UnitTest::GetInstance()->current_test_info()->name() + suffix;
}

Result plan(const std::string& args) {
  const std::string command =
      std::string(LOOM_BINARY) + " plan layout " + args + " 2>" + temp(".err");
  Result r;
  FILE* pipe = popen(command.c_str(), "r");
  std::array<char, 4096> buf{};
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) r.out.append(buf.data(), n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
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
  EXPECT_NE(r.out.find("k = 59"), std::string::npos);
  EXPECT_NE(r.out.find("        64  yes    8:8 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("       256  yes    8:8 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("         1  no "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("b_min = "), std::string::npos);
  for (const char* planner : {"entrain ", "disttrain ", "dip "})
    EXPECT_NE(r.out.find(planner), std::string::npos) << planner;
  EXPECT_EQ(plan(kSynth).out, r.out);  // deterministic
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
