// `loom schedule export` and `loom sim --schedule`: a saved schedule runs back to the same
// timeline, a PyTorch action CSV runs through Loom's lowering, and a hand-edited schedule
// that deadlocks, misses a producer or does not parse exits 2 saying where.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "cli_support.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

using test::run_loom;
using test::slurp;

std::string config(const std::string& name) {
  return test::source_path("configs/" + name);
}

/// `loom sim` on the evaluator into `out`; returns its output (exit code checked).
std::string sim(const std::string& args, const std::string& out) {
  const auto r = run_loom("sim " + args + " --backend evaluator --no-plot -q --out " + out);
  EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.output;
  return r.output;
}

void export_to(const std::string& args, const std::string& file) {
  const auto r = run_loom("schedule export " + args + " --out " + file);
  ASSERT_EQ(r.exit_code, 0) << args << "\n" << r.output;
}

std::string replace(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "no '" << from << "' in:\n" << text;
  return at == std::string::npos ? text : text.replace(at, from.size(), to);
}

TEST(ScheduleCli, SavedScheduleRunsToTheSameTimeline) {
  test::TempDir dir;
  const std::string cfg = config("examples/vlm-frozen.toml");
  export_to(cfg + " --format loom", dir.path("a.loom"));
  export_to(cfg + " --format loom", dir.path("b.loom"));
  EXPECT_EQ(slurp(dir.path("a.loom")), slurp(dir.path("b.loom")));  // byte-identical reruns
  sim(cfg, dir.path("planned"));
  sim(cfg + " --schedule " + dir.path("a.loom"), dir.path("loaded"));
  for (const char* file : {"timeline.csv", "schedule.txt", "memory.csv"}) {
    EXPECT_EQ(slurp(dir.path("planned/") + file), slurp(dir.path("loaded/") + file)) << file;
    EXPECT_FALSE(slurp(dir.path("planned/") + file).empty()) << file;
  }
}

TEST(ScheduleCli, PytorchCsvRunsThroughLoomsLowering) {
  for (const char* scheduler : {"1f1b", "zb-h1", "interleaved-1f1b"}) {
    test::TempDir dir;
    const std::string cfg =
        config("examples/uniform-1f1b.toml") + " --set schedule.name=" + scheduler +
        (std::string(scheduler) == "interleaved-1f1b" ? " --set schedule.interleaved-1f1b.chunks=2"
                                                      : "");
    export_to(cfg + " --format pytorch-csv", dir.path("s.csv"));
    EXPECT_EQ(slurp(dir.path("s.csv")).rfind("0F0,", 0), 0u) << slurp(dir.path("s.csv"));
    sim(cfg, dir.path("planned"));
    sim(cfg + " --schedule " + dir.path("s.csv"), dir.path("csv"));
    EXPECT_EQ(slurp(dir.path("planned/timeline.csv")), slurp(dir.path("csv/timeline.csv")))
        << scheduler;
    if (std::string(scheduler) != "zb-h1") continue;
    export_to(cfg + " --format pytorch-csv --comms", dir.path("c.csv"));
    EXPECT_NE(slurp(dir.path("c.csv")).find("0F0,0SEND_F0,"), std::string::npos);
    sim(cfg + " --schedule " + dir.path("c.csv"), dir.path("comms"));
    EXPECT_EQ(slurp(dir.path("planned/timeline.csv")), slurp(dir.path("comms/timeline.csv")));
  }
}

TEST(ScheduleCli, LegacyPytorchNamesRunWithTheirFlag) {
  // A ZB-H1 CSV in PyTorch's pre-2.5 names (B the input gradient beside W): the flag runs it
  // to the planned timeline; without the flag its B would be a second full backward.
  test::TempDir dir;
  const std::string cfg = config("examples/uniform-1f1b.toml") + " --set schedule.name=zb-h1";
  export_to(cfg + " --format pytorch-csv", dir.path("s.csv"));
  std::string text = slurp(dir.path("s.csv"));
  for (size_t at = 0; (at = text.find('I', at)) != std::string::npos;) text[at] = 'B';
  const std::string legacy = dir.write("legacy.csv", text);
  sim(cfg, dir.path("planned"));
  sim(cfg + " --schedule " + legacy + " --pytorch-legacy-names", dir.path("legacy"));
  EXPECT_EQ(slurp(dir.path("planned/timeline.csv")), slurp(dir.path("legacy/timeline.csv")));
  EXPECT_NE(run_loom("sim " + cfg + " --backend evaluator -q --out " + dir.path("x") +
                     " --schedule " + legacy)
                .exit_code,
            0);
}

TEST(ScheduleCli, DeadlockNamesRankStepAndProducer) {
  test::TempDir dir;
  const std::string cfg =
      config("examples/uniform-1f1b.toml") + " --set parallel.pp=2 --set schedule.microbatches=2";
  export_to(cfg, dir.path("s.loom"));
  // Rank 0 waits for microbatch 0's gradient before it has sent microbatch 0 forward.
  std::string text = slurp(dir.path("s.loom"));
  const size_t at = text.find("  0RECV_B0");
  const std::string line = text.substr(at, text.find('\n', at) + 1 - at);
  text.erase(at, line.size());
  text = replace(text, "  0F0 ", line + "  0F0 ");
  const std::string edited = dir.write("deadlock.loom", text);
  // Each op is named by its step in its rank's list and its line in the file.
  auto line_of = [&](const std::string& op) {
    const std::string before = text.substr(0, text.find("  " + op));
    return std::to_string(1 + std::count(before.begin(), before.end(), '\n'));
  };
  test::expect_exit(
      "sim " + cfg + " --backend evaluator -q --schedule " + edited, 2,
      {edited, "schedule deadlocks",
       "rank 0 stuck at step 0 (0RECV_B0:L4<-1, line " + line_of("0RECV_B0") + ")",
       "waits for its producer, rank 1 step 3 (1SEND_B0:L4->0, line " + line_of("1SEND_B0") + ")",
       "rank 1 stuck at step 0 (1RECV_F0:L4<-0, line " + line_of("1RECV_F0") + ")"});
  // Without the send and receive of microbatch 0's activations, rank 1's forward has no
  // input: the validator names the op and the layer whose output is missing.
  text = slurp(dir.path("s.loom"));
  text = replace(text, "  0SEND_F0:L4->1 bytes=0\n", "");
  text = replace(text, "  1RECV_F0:L4<-0 bytes=0\n", "");
  const std::string missing = dir.write("missing.loom", text);
  test::expect_exit("sim " + cfg + " --backend evaluator -q --schedule " + missing, 2,
                    {missing, "data dependency violated at rank 1 op #0 (1F0)",
                     "forward needs the output of layer 3"});
}

TEST(ScheduleCli, ACsvDeadlockIsNamedByTheFilesStepsAndLines) {
  // Rank 1 runs microbatch 1 forward first, and waits for it while rank 0 waits for
  // microbatch 0's gradient. The file has no messages: each stuck receive is named by the
  // file's step it serves (fields counted as PyTorch counts steps, the idle one included),
  // with the line and column of that action.
  test::TempDir dir;
  const std::string cfg =
      config("examples/uniform-1f1b.toml") + " --set parallel.pp=2 --set schedule.microbatches=2";
  const std::string csv = dir.write("dead.csv", "0F0,0B0,0F1,0B1\n1F1,,1F0,1B0,1B1\n");
  test::expect_exit(
      "sim " + cfg + " --backend evaluator -q --schedule " + csv, 2,
      {csv + ": schedule deadlocks: 2 rank(s) can never finish",
       "rank 0 stuck at Loom's 0RECV_B0:L4<-1 before step 1 (0B0, line 1:5): waits for its "
       "producer, rank 1 Loom's 1SEND_B0:L4->0 after step 3 (1B0, line 2:10)",
       "rank 1 stuck at Loom's 1RECV_F1:L4<-0 before step 0 (1F1, line 2:1)"});
}

TEST(ScheduleCli, ParseErrorsAndMismatchesExit2) {
  test::TempDir dir;
  const std::string cfg = config("examples/uniform-1f1b.toml");
  export_to(cfg, dir.path("s.loom"));
  const std::string bad = dir.write("bad.loom", replace(slurp(dir.path("s.loom")), "0F1 ", "0Q1 "));
  const size_t at = slurp(bad).find("0Q1");
  const std::string before = slurp(bad).substr(0, at);
  const auto line = 1 + std::count(before.begin(), before.end(), '\n');
  const auto column = at - before.rfind('\n') + 1;  // at the pass letter
  test::expect_exit(
      "sim " + cfg + " -q --schedule " + bad, 2,
      {bad + ":" + std::to_string(line) + ":" + std::to_string(column) + ":", "expected a pass"});
  // A schedule of another model; a CSV for another pipeline depth.
  test::expect_exit(
      "sim " + config("examples/vlm-frozen.toml") + " -q --schedule " + dir.path("s.loom"), 2,
      {"are not the config's model"});
  export_to(cfg + " --format pytorch-csv", dir.path("s.csv"));
  test::expect_exit("sim " + cfg + " -q --set parallel.pp=2 --schedule " + dir.path("s.csv"), 2,
                    {"s.csv:", "--set parallel.pp=4"});
  test::expect_exit("schedule export " + cfg + " --format onnx --out " + dir.path("x"), 2,
                    {"onnx"});
}

TEST(ScheduleCli, ChakraTracesRunBackAndBrokenOnesExit2) {
  test::TempDir dir;
  const std::string cfg = config("examples/vlm-frozen.toml");
  const std::string traces = dir.path("et");
  export_to(cfg + " --format chakra", traces);
  EXPECT_TRUE(std::filesystem::exists(traces + "/loom.0.et"));
  EXPECT_TRUE(std::filesystem::exists(traces + "/comm_group.json"));
  sim(cfg, dir.path("planned"));
  sim(cfg + " --schedule " + traces, dir.path("loaded"));
  for (const char* file : {"timeline.csv", "schedule.txt", "memory.csv"})
    EXPECT_EQ(slurp(dir.path("planned/") + file), slurp(dir.path("loaded/") + file)) << file;
  // The folder is Loom's: replaced with --force only; a folder of other files never.
  test::expect_exit("schedule export " + cfg + " --format chakra --out " + traces, 2, {"--force"});
  export_to(cfg + " --format chakra --force", traces);
  std::filesystem::create_directories(dir.path("mine"));
  dir.write("mine/notes.txt", "");
  test::expect_exit("schedule export " + cfg + " --format chakra --force --out " + dir.path("mine"),
                    2, {"not a Loom output folder"});
  // Cut short: exit 2 naming the file.
  std::filesystem::resize_file(traces + "/loom.1.et",
                               std::filesystem::file_size(traces + "/loom.1.et") - 3);
  test::expect_exit("sim " + cfg + " -q --schedule " + traces, 2, {"loom.1.et: truncated"});
}

}  // namespace
}  // namespace loom
