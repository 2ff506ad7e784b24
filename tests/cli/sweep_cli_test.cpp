// End-to-end `loom sweep`: byte-identical results whatever -j, a failing or infeasible
// point is a row with its reason, resume after a killed run loses and duplicates nothing,
// shards merged equal the full run, Ctrl-C leaves a valid CSV, bad input exits 2 first.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "cli_support.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

namespace fs = std::filesystem;
using test::run_loom;
using test::slurp;

/// 2 microbatch counts x 3 data-parallel degrees x 3 schedulers on the textbook config (pp
/// 4): dp 4 needs 16 of its 8 GPUs (infeasible); encoders-colocated needs an encoder (failed).
std::string small_study(const test::TempDir& dir) {
  return dir.write("small.toml", "base = \"" +
                                     test::source_path("configs/examples/uniform-1f1b.toml") +
                                     "\"\n"
                                     "schedulers = [\"1f1b\", \"gpipe\", \"encoders-colocated\"]\n"
                                     "[axes]\n"
                                     "\"schedule.microbatches\" = [4, 8]\n"
                                     "\"parallel.dp\" = [1, 2, 4]\n");
}

/// Enough points (3 x 64 x 4) that a run can be interrupted part-way.
std::string large_study(const test::TempDir& dir) {
  return dir.write("large.toml", "base = \"" +
                                     test::source_path("configs/examples/uniform-1f1b.toml") +
                                     "\"\n"
                                     "schedulers = [\"1f1b\", \"gpipe\", \"zb-h1\"]\n"
                                     "[axes]\n"
                                     "\"schedule.microbatches\" = { start = 1, stop = 64 }\n"
                                     "\"parallel.pp\" = [1, 2, 4, 8]\n");
}

size_t data_rows(const std::string& csv) {
  size_t lines = 0;
  for (char c : csv) lines += c == '\n';
  return lines == 0 ? 0 : lines - 1;
}

/// Starts `loom ARGS` in the background; returns its pid.
pid_t start_loom(const test::TempDir& dir, const std::string& args) {
  const std::string pid_file = dir.path("pid");
  const std::string cmd =
      std::string(LOOM_BINARY) + " " + args + " >/dev/null 2>&1 & echo $! > " + pid_file;
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  return static_cast<pid_t>(std::stol(slurp(pid_file)));
}

/// Waits until `csv` holds at least `rows` rows (or 60 s).
void wait_for_rows(const std::string& csv, size_t rows) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  // Poll often: the whole sweep takes about a second, and the kill must land inside it.
  while (data_rows(slurp(csv)) < rows && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
}

void wait_exit(pid_t pid) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (kill(pid, 0) == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

TEST(SweepCli, ResultsAreByteIdenticalForOneOrFourJobs) {
  test::TempDir dir;
  const std::string study = small_study(dir);
  for (const char* j : {"1", "4"}) {
    const auto r = run_loom("sweep " + study + " -q -j " + j + " --out " + dir.path(j));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("18 of 18 points"), std::string::npos) << r.output;
  }
  EXPECT_EQ(slurp(dir.path("1") + "/results.csv"), slurp(dir.path("4") + "/results.csv"));
  EXPECT_EQ(slurp(dir.path("1") + "/results.json"), slurp(dir.path("4") + "/results.json"));
  EXPECT_EQ(data_rows(slurp(dir.path("1") + "/results.csv")), 18u);
}

TEST(SweepCli, FailedAndInfeasiblePointsAreRowsWithTheirReason) {
  test::TempDir dir;
  const auto r = run_loom("sweep " + small_study(dir) + " -q -j 2 --out " + dir.path("o"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // 2 x 3 x 3: dp 4 is infeasible for 1f1b and gpipe (4 points); encoders-colocated
  // fails on every point (6); the rest (8) run.
  EXPECT_NE(r.output.find("ok 8, infeasible 4, failed 6"), std::string::npos) << r.output;
  const auto j = nlohmann::json::parse(slurp(dir.path("o") + "/results.json"));
  ASSERT_EQ(j["rows"].size(), 18u);
  for (const auto& row : j["rows"]) {
    if (row["status"] == "ok") {
      EXPECT_GT(row["iteration_time_s"].get<double>(), 0) << row;
      EXPECT_GT(row["peak_memory_max_bytes"].get<double>(),
                row["peak_memory_mean_bytes"].get<double>() * 0.99)
          << row;
      EXPECT_EQ(row["reason"], "");
    } else {
      EXPECT_NE(row["reason"], "") << row;
      EXPECT_TRUE(row["iteration_time_s"].is_null()) << row;
    }
    if (row["scheduler"] == "encoders-colocated") {
      EXPECT_EQ(row["status"], "failed") << row;
    } else if (row["parallel.dp"] == 4) {
      EXPECT_EQ(row["status"], "infeasible") << row;
      EXPECT_NE(row["reason"].get<std::string>().find("16 GPUs, but the cluster has 8"),
                std::string::npos)
          << row;
    }
  }
}

TEST(SweepCli, ResumeAfterAKilledRunLosesAndDuplicatesNoRow) {
  test::TempDir dir;
  const std::string study = large_study(dir);
  const auto full = run_loom("sweep " + study + " -q -j 2 --out " + dir.path("full"));
  ASSERT_EQ(full.exit_code, 0) << full.output;
  const std::string csv = dir.path("part") + "/results.csv";
  const pid_t pid = start_loom(dir, "sweep " + study + " -q -j 1 --out " + dir.path("part"));
  wait_for_rows(csv, 40);
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  wait_exit(pid);
  const size_t before = data_rows(slurp(csv));
  ASSERT_GE(before, 40u);
  ASSERT_LT(before, 768u) << "the run finished before it was killed";
  const auto resumed = run_loom("sweep " + study + " -q -j 2 --resume --out " + dir.path("part"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("(" + std::to_string(before) + " from an earlier run"),
            std::string::npos)
      << resumed.output;
  EXPECT_EQ(slurp(csv), slurp(dir.path("full") + "/results.csv"));
  EXPECT_EQ(slurp(dir.path("part") + "/results.json"), slurp(dir.path("full") + "/results.json"));
}

TEST(SweepCli, CtrlCLeavesAValidSortedCsvAndResumeFinishesIt) {
  test::TempDir dir;
  const std::string study = large_study(dir);
  const std::string csv = dir.path("o") + "/results.csv";
  const pid_t pid = start_loom(dir, "sweep " + study + " -j 2 --out " + dir.path("o"));
  wait_for_rows(csv, 20);
  ASSERT_EQ(kill(pid, SIGINT), 0);
  wait_exit(pid);
  const std::string partial = slurp(csv);
  ASSERT_LT(data_rows(partial), 768u);
  // Every row complete, in point order (the run sorted what it had on the way out).
  const auto j = nlohmann::json::parse(slurp(dir.path("o") + "/results.json"));
  ASSERT_EQ(j["rows"].size(), data_rows(partial));
  for (size_t i = 1; i < j["rows"].size(); ++i)
    EXPECT_LT(j["rows"][i - 1]["point"].get<int>(), j["rows"][i]["point"].get<int>());
  const auto r = run_loom("sweep " + study + " -q -j 2 --resume --out " + dir.path("o"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(data_rows(slurp(csv)), 768u);
}

TEST(SweepCli, ShardsMergedEqualTheFullRun) {
  test::TempDir dir;
  const std::string study = small_study(dir);
  ASSERT_EQ(run_loom("sweep " + study + " -q --out " + dir.path("full")).exit_code, 0);
  std::string shards;
  size_t rows = 0;
  for (int i = 0; i < 4; ++i) {
    const std::string out = dir.path("shard-" + std::to_string(i));
    const auto r =
        run_loom("sweep " + study + " -q -j 1 --shard " + std::to_string(i) + "/4 --out " + out);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    rows += data_rows(slurp(out + "/results.csv"));
    shards += " " + out;
  }
  EXPECT_EQ(rows, 18u);  // a partition: no point in two shards
  const auto m = run_loom("sweep merge" + shards + " --out " + dir.path("merged"));
  ASSERT_EQ(m.exit_code, 0) << m.output;
  EXPECT_NE(m.output.find("18 of 18 points"), std::string::npos) << m.output;
  EXPECT_EQ(slurp(dir.path("merged") + "/results.csv"), slurp(dir.path("full") + "/results.csv"));
  EXPECT_EQ(slurp(dir.path("merged") + "/results.json"), slurp(dir.path("full") + "/results.json"));
}

TEST(SweepCli, AnEditedStudyRerunsOnlyTheNewPoints) {
  test::TempDir dir;
  const std::string study = small_study(dir);
  ASSERT_EQ(run_loom("sweep " + study + " -q --out " + dir.path("o")).exit_code, 0);
  std::string text = slurp(study);
  text.replace(text.find("[4, 8]"), 6, "[4, 8, 12]");
  std::ofstream(study) << text;
  const auto r = run_loom("sweep " + study + " -q --resume --out " + dir.path("o"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("27 of 27 points (18 from an earlier run, 9 run)"), std::string::npos)
      << r.output;
}

TEST(SweepCli, BadStudyInputExits2NamingTheLineBeforeAnyPointRuns) {
  test::TempDir dir;
  const std::string base = test::source_path("configs/examples/uniform-1f1b.toml");
  const std::string unknown =
      dir.write("unknown.toml", "base = \"" + base + "\"\n[axes]\n\"parallel.ppp\" = [1, 2]\n");
  test::expect_exit("sweep " + unknown + " --out " + dir.path("o"), 2,
                    {"unknown.toml:3: axis 'parallel.ppp'", "unknown key"});
  EXPECT_FALSE(fs::exists(dir.path("o"))) << "a point ran or a file was written";
  const std::string empty =
      dir.write("empty.toml", "base = \"" + base + "\"\n\n[axes]\n\"parallel.pp\" = []\n");
  test::expect_exit("sweep " + empty, 2, {"empty.toml:4: axis 'parallel.pp' is empty"});
  const std::string sched =
      dir.write("sched.toml", "base = \"" + base + "\"\nschedulers = [\"1f1b\", \"2f2b\"]\n");
  test::expect_exit("sweep " + sched, 2, {"sched.toml:2: 'schedulers'", "2f2b", "gpipe"});
  test::expect_exit("sweep " + unknown + " --shard 4/4", 2, {"--shard '4/4'"});
}

TEST(SweepCli, SimGridPointsEachRunInAFreshProcess) {
  // SimGrid allows one simulation per process: a worker reused for a second SimGrid point
  // would fail it. 4 points on 2 jobs reuse nothing.
  test::TempDir dir;
  const std::string study = dir.write(
      "simgrid.toml", "base = \"" + test::source_path("configs/examples/uniform-1f1b.toml") +
                          "\"\nbackend = \"simgrid\"\nschedulers = [\"1f1b\", \"zb-h1\"]\n"
                          "[axes]\n\"schedule.microbatches\" = [4, 8]\n");
  const auto r = run_loom("sweep " + study + " -q -j 2 --out " + dir.path("o"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ok 4, infeasible 0, failed 0"), std::string::npos) << r.output;
  // 8 microbatches of 1f1b on the textbook config: 33 ms (README golden summary).
  const auto j = nlohmann::json::parse(slurp(dir.path("o") + "/results.json"));
  EXPECT_NEAR(j["rows"][2]["iteration_time_s"].get<double>(), 0.033, 1e-12) << j["rows"][2];
}

TEST(SimSchedulers, EverySchedulerInOneTableAndTheInapplicableWithTheirReason) {
  test::TempDir dir;
  const auto r =
      run_loom("sim " + test::source_path("configs/examples/uniform-1f1b.toml") +
                   " -q --no-plot --schedulers 1f1b,gpipe,zb-h1,cornstarch --out " + dir.path("o"),
               "2>/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // SimGrid (the config's backend) for each: 1f1b and gpipe take 33 ms, zb-h1 27 ms.
  EXPECT_NE(r.output.find("zb-h1                        27.000"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1f1b                         33.000"), std::string::npos) << r.output;
  EXPECT_LT(r.output.find("zb-h1"), r.output.find("1f1b")) << "sorted by iteration time";
  EXPECT_NE(r.output.find("not applicable  cornstarch: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("needs at least one encoder module"), std::string::npos) << r.output;
  const std::string csv = slurp(dir.path("o") + "/schedulers.csv");
  EXPECT_EQ(csv.substr(0, csv.find('\n')),
            "scheduler,status,iteration_time_s,throughput_samples_per_s,bubble_fraction,"
            "peak_memory_max_bytes,peak_memory_mean_bytes,tflops_per_gpu,mfu,tokens_per_s_per_gpu,"
            "busiest_link_utilisation,busiest_link_tier,reason");
  EXPECT_NE(csv.find("\ncornstarch,failed,"), std::string::npos) << csv;
  // The Gantt grid's input: one timeline per scheduler that ran.
  EXPECT_TRUE(fs::exists(dir.path("o") + "/timelines/zb-h1.csv"));
  EXPECT_FALSE(fs::exists(dir.path("o") + "/timelines/cornstarch.csv"));
  test::expect_exit(
      "sim " + test::source_path("configs/examples/uniform-1f1b.toml") + " --schedulers 1f1b,2f2b",
      2, {"--schedulers", "2f2b"});
}

TEST(SimSchedulers, AnEntryRunsItsSchedulerWithItsOwnOptions) {
  // interleaved-1f1b with 2 chunks beside plain 1F1B and zb-v, one table (issue 47): with
  // one chunk it would equal 1F1B; with two its bubble shrinks.
  test::TempDir dir;
  const auto r = run_loom("sim " + test::source_path("configs/examples/uniform-1f1b.toml") +
                              " -q --no-plot --backend evaluator --schedulers "
                              "'interleaved-1f1b:chunks=2,1f1b,zb-v' --out " +
                              dir.path("o"),
                          "2>/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string csv = slurp(dir.path("o") + "/schedulers.csv");
  auto time_of = [&](const std::string& entry) {
    const size_t at = csv.find("\n" + entry + ",ok,");
    EXPECT_NE(at, std::string::npos) << entry << "\n" << csv;
    return at == std::string::npos ? 0.0 : std::stod(csv.substr(at + entry.size() + 5));
  };
  const double interleaved = time_of("interleaved-1f1b:chunks=2"), plain = time_of("1f1b");
  EXPECT_GT(time_of("zb-v"), 0);
  EXPECT_LT(interleaved, plain);  // (m v + p - 1) / v < m + p - 1 for v = 2
  EXPECT_TRUE(fs::exists(dir.path("o") + "/timelines/interleaved-1f1b_chunks-2.csv"));
  // A key the scheduler does not declare: exit 2, the nearest spelling, before any run.
  test::expect_exit("sim " + test::source_path("configs/examples/uniform-1f1b.toml") +
                        " --schedulers 'interleaved-1f1b:chunk=2,1f1b'",
                    2, {"interleaved-1f1b has no option 'chunk'", "did you mean 'chunks'"});
  test::expect_exit("sim " + test::source_path("configs/examples/uniform-1f1b.toml") +
                        " --schedulers 'zb-v:chunks'",
                    2, {"expected KEY=VALUE", "interleaved-1f1b:chunks=2"});
}

TEST(SweepCli, SlurmScriptRunsOneShardPerArrayTask) {
  test::TempDir dir;
  const auto r = run_loom("sweep " + small_study(dir) + " --slurm --tasks 3 --cpus-per-task 2 " +
                          "--time 00:10:00 --out " + dir.path("o"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string script = slurp(dir.path("o") + "/sweep.sbatch");
  for (const char* s :
       {"#SBATCH --array=0-2\n", "#SBATCH --cpus-per-task=2\n", "#SBATCH --time=00:10:00\n",
        "--shard \"${SLURM_ARRAY_TASK_ID}/3\"", "/shard-\"${SLURM_ARRAY_TASK_ID}\"", " --resume\n"})
    EXPECT_NE(script.find(s), std::string::npos) << s << "\n" << script;
  EXPECT_FALSE(fs::exists(dir.path("o") + "/results.csv")) << "--slurm must not run points";
}

}  // namespace
}  // namespace loom
