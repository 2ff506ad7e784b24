// Measured throughput tables: lookup by live node count, the artifact's JSON, errors that
// name the file and line or key; layout keys and memoization.
#include "replay/throughput_table.hpp"

#include <gtest/gtest.h>

#include <fstream>

#include "core/errors.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

std::string write(const test::TempDir& tmp, const std::string& name, const std::string& text) {
  const std::string path = tmp.path(name);
  std::ofstream(path) << text;
  return path;
}

std::string error_of(const std::string& path, const std::string& model = "") {
  try {
    ThroughputTable::load(path, model);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(ThroughputTable, UsesTheLargestMeasuredCountAtOrBelow) {
  const ThroughputTable t({{15, 100}, {20, 150}}, "t");
  EXPECT_EQ(t.samples_per_s(14), 0);
  EXPECT_EQ(t.samples_per_s(15), 100);
  EXPECT_EQ(t.samples_per_s(19), 100);
  EXPECT_EQ(t.samples_per_s(32), 150);
  const IterationTimer timer = t.timer(300);
  EXPECT_DOUBLE_EQ(timer(Layout{{{20, {}, 0}}}), 2.0);
  EXPECT_THROW(timer(Layout{{{10, {}, 0}}}), TooFewNodesError);
}

TEST(ThroughputTable, ReadsTheArtifactJsonByModel) {
  const std::string path = test::source_path("traces/oobleck/throughput_by_nodes.json");
  const ThroughputTable t = ThroughputTable::load(path, "GPT-3-6.7b");
  EXPECT_NEAR(t.samples_per_s(30), 5.507784136, 1e-9);
  EXPECT_EQ(t.samples_per_s(15), 0);  // "does not fit"
  EXPECT_NE(error_of(path).find("holds several models"), std::string::npos);
  EXPECT_NE(error_of(path, "GPT-4").find("no model 'GPT-4' (known: BERT-large"), std::string::npos);
}

TEST(ThroughputTable, ErrorsNameTheFileAndLineOrKey) {
  test::TempDir tmp;
  EXPECT_NE(error_of(write(tmp, "a.csv", "nodes,samples_per_s\n30,12\n29,-1\n")).find("a.csv:3"),
            std::string::npos);
  EXPECT_NE(error_of(write(tmp, "b.csv", "n,s\n")).find("b.csv:1: expected the header"),
            std::string::npos);
  EXPECT_NE(error_of(write(tmp, "c.csv", "nodes,samples_per_s\nx,1\n")).find("c.csv:2"),
            std::string::npos);
  EXPECT_NE(error_of(write(tmp, "d.json", "{\"30\": \"fast\"}")).find("key '30'"),
            std::string::npos);
  EXPECT_NE(error_of(tmp.path("missing.csv")).find("cannot open"), std::string::npos);
}

TEST(Layout, KeysIgnorePipelineOrderAndMemoizationCallsOncePerLayout) {
  const Layout a{{{2, {12, 12}, 8}, {3, {8, 8, 8}, 10}}};
  const Layout b{{{3, {8, 8, 8}, 10}, {2, {12, 12}, 8}}};
  EXPECT_EQ(a.key(), b.key());
  EXPECT_EQ(a.nodes(), 5);
  int calls = 0;
  MemoizedTimer timer([&calls](const Layout& l) {
    ++calls;
    return static_cast<double>(l.nodes());
  });
  EXPECT_EQ(timer(a), 5);
  EXPECT_EQ(timer(b), 5);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(timer.distinct_layouts(), 1u);
}

}  // namespace
}  // namespace loom
