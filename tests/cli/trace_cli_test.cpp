// End-to-end tests of `loom trace`: a malformed trace exits 2 naming file:line, generated
// traces are byte-identical for one seed, and `info` reports the shipped files' counts.
#include <gtest/gtest.h>

#include <fstream>

#include "cli_support.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

using Result = test::CliResult;

Result loom_trace(const std::string& args) {
  return test::run_loom("trace " + args);
}

using test::slurp;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(CliTrace, MalformedTracesExit2NamingTheLine) {
  test::TempDir dir;
  const std::pair<std::string, std::string> kCases[] = {
      {"0,add,node1\n600000,add,node2\n300000,remove,node1\n", "bad.csv:3:"},  // unsorted
      {"0,add,node1\n600000,remove,node9\n", "bad.csv:2:"},                    // unknown node
      {"0,add,node1\n600000,crash,node1\n", "bad.csv:2:"},                     // bad event
  };
  for (const auto& [text, where] : kCases) {
    const Result r = loom_trace("info " + dir.write("bad.csv", text));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_TRUE(contains(r.output, where)) << r.output;
  }
  const Result v100 = loom_trace("info " + test::source_path("traces/spot/gcp-v100x1-east1c.txt"));
  EXPECT_EQ(v100.exit_code, 2);
  EXPECT_TRUE(contains(v100.output, "gcp-v100x1-east1c.txt:4:")) << v100.output;
}

TEST(CliTrace, InfoOnTheShippedP3Trace) {
  const Result r = loom_trace("info " + test::source_path("traces/spot/ec2-p3.csv"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "events     344:")) << r.output;
  EXPECT_TRUE(contains(r.output, "(11.37 h)")) << r.output;
  EXPECT_TRUE(contains(r.output, "max 32")) << r.output;
  const Result v100 = loom_trace("info --out-of-order drop " +
                                 test::source_path("traces/spot/gcp-v100x1-east1c.txt"));
  ASSERT_EQ(v100.exit_code, 0) << v100.output;
  EXPECT_TRUE(contains(v100.output, "dropped    15 samples")) << v100.output;
}

TEST(CliTrace, InfoJsonHasTheSameNumbers) {
  const Result r =
      test::run_loom("trace info --json " + test::source_path("traces/spot/ec2-p3.csv"), "2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["initial_nodes"].get<int>() + j["events"].get<int>(), 344);
  EXPECT_NEAR(j["duration_s"].get<double>() / 3600, 11.37, 0.005);
  EXPECT_EQ(j["max_alive"], 32);
  EXPECT_EQ(j["adds"].get<int>() + j["removes"].get<int>(), j["events"].get<int>());
  EXPECT_EQ(j["format"], "events");
}

TEST(CliTrace, GenerateIsDeterministicAndReadable) {
  test::TempDir dir;
  for (const char* out : {"a.csv", "b.csv"}) {
    const Result r = loom_trace(
        "generate --kind poisson --rate 8 --rejoin 15min --duration 12h "
        "--seed 5 --out " +
        dir.path(out));
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  EXPECT_EQ(slurp(dir.path("a.csv")), slurp(dir.path("b.csv")));
  const Result info = loom_trace("info " + dir.path("a.csv"));
  EXPECT_EQ(info.exit_code, 0) << info.output;
  EXPECT_TRUE(contains(info.output, "(12.00 h)")) << info.output;
  // An option of the other kind is bad usage, and nothing is written.
  const Result bad = loom_trace("generate --kind periodic --rate 3 --out " + dir.path("c.csv"));
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_TRUE(contains(bad.output, "--rate")) << bad.output;
  EXPECT_FALSE(std::ifstream(dir.path("c.csv")).good());
}

}  // namespace
}  // namespace loom
