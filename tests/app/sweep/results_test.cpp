// results.csv: quoting round-trips, a row cut short by a kill is dropped, rows are sorted
// by point whatever order they finished in, and merge rejects conflicting shards.
#include "app/sweep/results.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include "cli_support.hpp"
#include "core/errors.hpp"
#include "test_support.hpp"

namespace loom::sweep {
namespace {

PointResult failed(const std::string& reason) {
  PointResult r;
  r.status = "failed";
  r.reason = reason;
  return r;
}

TEST(SweepResults, CsvRoundTripsQuotedCellsAndDropsACutLastLine) {
  test::TempDir dir;
  Table t;
  t.columns = all_columns({"config", "scheduler"});
  t.rows.push_back(row_cells(0, {"a.toml", "1f1b"}, "00ff", failed("x, \"quoted\"\nline 2")));
  const int fd = open_for_append(dir.path("r"), t);
  append_row(fd, row_cells(1, {"a.toml", "gpipe"}, "0100", failed("plain")));
  close(fd);
  // A kill in the middle of a write leaves part of a line: it is not a row.
  std::ofstream(dir.path("r") + "/results.csv", std::ios::app) << "2,a.toml,zb";
  const Table back = read_csv(dir.path("r") + "/results.csv");
  EXPECT_EQ(back.columns, t.columns);
  EXPECT_EQ(back.find("scheduler"), 2u);
  EXPECT_EQ(back.find("no such column"), std::nullopt);
  ASSERT_EQ(back.rows.size(), 2u);
  EXPECT_EQ(result_of(back, back.rows[0]).reason, "x, \"quoted\"\nline 2");
  EXPECT_EQ(back.rows[1][2], "gpipe");
}

TEST(SweepResults, WrittenRowsAreSortedByPointAndJsonIsTyped) {
  test::TempDir dir;
  Table t;
  t.columns = all_columns({"config", "parallel.pp"});
  PointResult ok;
  ok.status = "ok";
  ok.iteration_time_s = "0.033";
  for (size_t p : {10, 2, 1}) t.rows.push_back(row_cells(p, {"a.toml", "4"}, "h", ok));
  write_results(dir.path("r"), "s.toml", 12, t);
  const Table back = read_csv(dir.path("r") + "/results.csv");
  ASSERT_EQ(back.rows.size(), 3u);
  EXPECT_EQ(back.rows[0][0], "1");
  EXPECT_EQ(back.rows[2][0], "10");  // numeric, not text order
  const auto j = nlohmann::json::parse(test::slurp(dir.path("r") + "/results.json"));
  EXPECT_EQ(j["points"], 12);
  EXPECT_EQ(j["rows"][0]["parallel.pp"], 4);
  EXPECT_EQ(j["rows"][0]["iteration_time_s"], 0.033);
  EXPECT_EQ(j["rows"][0]["config_hash"], "h");
  EXPECT_TRUE(j["rows"][0]["bubble_fraction"].is_null());
}

TEST(SweepResults, MergeRejectsShardsThatDisagree) {
  test::TempDir dir;
  Table t;
  t.columns = all_columns({"config"});
  t.rows.push_back(row_cells(0, {"a.toml"}, "h0", failed("one")));
  write_results(dir.path("a"), "s.toml", 2, t);
  t.rows[0] = row_cells(0, {"a.toml"}, "h0", failed("another"));
  write_results(dir.path("b"), "s.toml", 2, t);
  try {
    merge_results({dir.path("a"), dir.path("b")}, dir.path("m"));
    FAIL() << "conflicting rows merged";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("point 0 differs"), std::string::npos) << e.what();
  }
  write_results(dir.path("c"), "other.toml", 2, t);
  EXPECT_THROW(merge_results({dir.path("a"), dir.path("c")}, dir.path("m")), InputError);
}

}  // namespace
}  // namespace loom::sweep
