// `loom plan cp`: exit codes, option names in errors, JSON owners, determinism.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace loom {
namespace {

struct Result {
  int exit_code = -1;
  std::string out;  // stdout only
};

Result loom_plan_cp(const std::string& args) {
  const std::string command = std::string(LOOM_BINARY) + " plan cp " + args + " 2>/dev/null";
  Result r;
  FILE* pipe = popen(command.c_str(), "r");
  std::array<char, 4096> buf{};
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) r.out.append(buf.data(), n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string stderr_of(const std::string& args) {
  const std::string command = std::string(LOOM_BINARY) + " plan cp " + args + " 2>&1 >/dev/null";
  std::string err;
  FILE* pipe = popen(command.c_str(), "r");
  std::array<char, 4096> buf{};
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) err.append(buf.data(), n);
  pclose(pipe);
  return err;
}

TEST(PlanCp, PrintsEveryDistributionSideBySide) {
  const Result r = loom_plan_cp("--mask embedded --seq 8192 --cp 4 --distribution all");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  for (const char* name : {"zigzag", "lpt", "ilp", "makespan"})
    EXPECT_NE(r.out.find(name), std::string::npos) << name << " in\n" << r.out;
}

TEST(PlanCp, JsonGivesTheOwnerOfEveryQueryBlockAndIsDeterministic) {
  const std::string args = "--mask packed --seq 10000 --cp 3 --query-block 100 --json";
  const Result r = loom_plan_cp(args);
  ASSERT_EQ(r.exit_code, 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const auto& owners = j["plans"][0]["owner"];
  ASSERT_EQ(owners.size(), 100u);
  for (const auto& o : owners) EXPECT_TRUE(o.get<int>() >= 0 && o.get<int>() < 3);
  EXPECT_EQ(loom_plan_cp(args).out, r.out);
}

TEST(PlanCp, BadOptionsExitTwoNamingTheOption) {
  for (const auto& [args, option] : std::vector<std::pair<std::string, std::string>>{
           {"--cp 0", "--cp"},
           {"--mask diagonal", "--mask"},
           {"--distribution ring", "--distribution"},
           {"--query-block 0", "--query-block"},
           {"--key-block -3", "--key-block"},
           {"--seq 0", "--seq"},
           {"--modality-fraction 1.5", "--modality-fraction"},
           {"--mask packed --packed-sequences 30", "packed_sequences"},
       }) {
    EXPECT_EQ(loom_plan_cp(args).exit_code, 2) << args;
    EXPECT_NE(stderr_of(args).find(option), std::string::npos) << args << ": " << stderr_of(args);
  }
}

}  // namespace
}  // namespace loom
