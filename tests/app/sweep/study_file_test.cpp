// Study files: axis expansion (product, zip, ranges), line-numbered errors for bad input,
// and the resolved-config hash that --resume and merge key rows by.
#include "app/sweep/study_file.hpp"

#include <gtest/gtest.h>

#include "app/sweep/point.hpp"
#include "cli_support.hpp"
#include "core/errors.hpp"
#include "test_support.hpp"

namespace loom::sweep {
namespace {

std::string base() {
  return test::source_path("configs/examples/uniform-1f1b.toml");
}

/// A study file in `dir` with `body` after a `base = ...` line (line 1).
std::string study(const test::TempDir& dir, const std::string& body) {
  return dir.write("study.toml", "base = \"" + base() + "\"\n" + body);
}

/// The InputError message of parsing and checking `path` ("" if it is accepted).
std::string error_of(const std::string& path) {
  try {
    check_axes(parse_study(path));
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(StudyFile, AxesAreCrossedInFileOrderWithSchedulersAndSeedsInnermost) {
  test::TempDir dir;
  const StudyFile s = parse_study(study(dir,
                                        "schedulers = [\"1f1b\", \"gpipe\"]\n"
                                        "seeds = [1, 2]\n"
                                        "[axes]\n"
                                        "\"schedule.microbatches\" = [4, 8, 16]\n"
                                        "parallel.pp = [2, 4]\n"));
  EXPECT_EQ(axis_columns(s), (std::vector<std::string>{"config", "schedule.microbatches",
                                                       "parallel.pp", "scheduler", "seed"}));
  const std::vector<Point> points = expand(s);
  ASSERT_EQ(points.size(), 3u * 2 * 2 * 2);
  EXPECT_EQ(points[0].cells, (std::vector<std::string>{s.base_cells[0], "4", "2", "1f1b", "1"}));
  EXPECT_EQ(points[1].cells[4], "2");      // seeds vary fastest
  EXPECT_EQ(points[2].cells[3], "gpipe");  // then schedulers
  EXPECT_EQ(points[4].cells[2], "4");      // then the last axis
  EXPECT_EQ(points[8].cells[1], "8");
  EXPECT_EQ(points[23].cells, (std::vector<std::string>{s.base_cells[0], "16", "4", "gpipe", "2"}));
  EXPECT_EQ(points[23].overrides,
            (std::vector<std::string>{"schedule.microbatches=16", "parallel.pp=4",
                                      "schedule.name=\"gpipe\"", "workload.seed=2",
                                      "sim.backend=\"evaluator\""}));
  for (size_t i = 0; i < points.size(); ++i) EXPECT_EQ(points[i].index, i);
}

TEST(StudyFile, ZipKeysAdvanceTogetherAsOneAxis) {
  test::TempDir dir;
  const StudyFile s = parse_study(study(dir,
                                        "[axes]\n"
                                        "parallel.pp = [2, 4]\n"
                                        "[[zip]]\n"
                                        "\"schedule.microbatches\" = [4, 8, 12]\n"
                                        "\"schedule.microbatch_size\" = [3, 2, 1]\n"));
  const std::vector<Point> points = expand(s);
  ASSERT_EQ(points.size(), 2u * 3);
  for (const Point& p : points) {
    const int mb = std::stoi(p.cells[2]), size = std::stoi(p.cells[3]);
    EXPECT_EQ(mb * size, mb == 4 ? 12 : mb == 8 ? 16 : 12) << "zipped values drifted apart";
  }
  EXPECT_EQ(points[3].cells[1], "4");
  EXPECT_EQ(points[3].cells[2], "4");
}

TEST(StudyFile, RangesIncludeTheirStopAndKeepIntegersIntegral) {
  test::TempDir dir;
  const StudyFile s =
      parse_study(study(dir,
                        "[axes]\n"
                        "\"schedule.microbatches\" = { start = 4, stop = 16, step = 4 }\n"
                        "\"cost.efficiency\" = { start = 0.25, stop = 0.5, step = 0.125 }\n"));
  ASSERT_EQ(s.axes.size(), 2u);
  std::vector<std::string> mb, eff;
  for (const AxisValue& v : s.axes[0].keys[0].values) mb.push_back(v.cell);
  for (const AxisValue& v : s.axes[1].keys[0].values) eff.push_back(v.toml);
  EXPECT_EQ(mb, (std::vector<std::string>{"4", "8", "12", "16"}));
  EXPECT_EQ(eff, (std::vector<std::string>{"0.25", "0.375", "0.5"}));
}

TEST(StudyFile, NestedAxisTablesNameTheSameKeysAsDottedOnes) {
  test::TempDir dir;
  const StudyFile s = parse_study(study(dir,
                                        "[axes.schedule]\n"
                                        "microbatches = [4, 8]\n"
                                        "[axes.model.modules.llm]\n"
                                        "layers = [8, 12]\n"));
  EXPECT_EQ(axis_columns(s), (std::vector<std::string>{"config", "schedule.microbatches",
                                                       "model.modules.llm.layers", "scheduler"}));
  EXPECT_EQ(error_of(s.path), "");
}

TEST(StudyFile, BadInputNamesTheStudyFilesLine) {
  test::TempDir dir;
  // Line 3 holds the unknown key; the error carries the config reader's explanation.
  std::string e = error_of(study(dir, "[axes]\n\"schedule.microbatchez\" = [4, 8]\n"));
  EXPECT_NE(e.find("study.toml:3: axis 'schedule.microbatchez'"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown key"), std::string::npos) << e;
  e = error_of(study(dir, "[axes]\n\"parallel.pp\" = []\n"));
  EXPECT_NE(e.find("study.toml:3: axis 'parallel.pp' is empty"), std::string::npos) << e;
  e = error_of(study(dir, "schedulers = [\"1f1b\",\n  \"no-such-scheduler\"]\n"));
  EXPECT_NE(e.find("study.toml:3: 'schedulers'"), std::string::npos) << e;
  EXPECT_NE(e.find("no-such-scheduler"), std::string::npos) << e;
  e = error_of(study(dir, "[axes]\n\"parallel.pp\" = [2, 0]\n"));
  EXPECT_NE(e.find("study.toml:3: axis 'parallel.pp' = 0"), std::string::npos) << e;
  e = error_of(study(dir, "[[zip]]\nparallel.pp = [2, 4]\n\"schedule.microbatches\" = [8]\n"));
  EXPECT_NE(e.find("study.toml:4: [[zip]] axis 'schedule.microbatches' has 1 values"),
            std::string::npos)
      << e;
  e = error_of(study(dir, "[axes]\nparallel.pp = { start = 4, stop = 2 }\n"));
  EXPECT_NE(e.find("study.toml:3: axis 'parallel.pp' range"), std::string::npos) << e;
  e = error_of(study(dir, "axis = 3\n"));
  EXPECT_NE(e.find("study.toml:2: unknown study key 'axis'"), std::string::npos) << e;
  e = error_of(dir.write("nobase.toml", "\n\nbase = \"missing.toml\"\n"));
  EXPECT_NE(e.find("nobase.toml:3: 'base': no config file"), std::string::npos) << e;
}

TEST(StudyFile, ConfigHashFollowsTheResolvedValuesNotTheirSpelling) {
  const Resolved a = resolve(base(), {"schedule.microbatches=8"});
  const Resolved b = resolve(base(), {});  // 8 is the file's value
  const Resolved c = resolve(base(), {"schedule.microbatches=16"});
  const Resolved d = resolve(base(), {"sim.backend=\"evaluator\""});
  EXPECT_EQ(a.hash.size(), 16u);
  EXPECT_EQ(a.hash, b.hash);
  EXPECT_NE(a.hash, c.hash);
  EXPECT_NE(a.hash, d.hash);
  EXPECT_EQ(a.scheduler, "1f1b");
}

TEST(StudyFile, ConfigHashCoversTheWorkloadCsvItNames) {
  test::TempDir dir;
  const std::string config =
      dir.write("c.toml", test::slurp(base()) + "\n[workload]\ncsv = \"w.csv\"\n");
  dir.write("w.csv", "sample_id,text_tokens\n0,1024\n");
  const std::string before = resolve(config, {}).hash;
  EXPECT_EQ(resolve(config, {}).hash, before);
  dir.write("w.csv", "sample_id,text_tokens\n0,2048\n");
  EXPECT_NE(resolve(config, {}).hash, before) << "an edited workload must rerun under --resume";
}

}  // namespace
}  // namespace loom::sweep
