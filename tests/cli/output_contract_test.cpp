// The output contract of the commands that write: --out is a folder created with its
// parents, staged as .NAME.tmp-PID and renamed into place; SIGINT / SIGTERM remove the
// staging and exit 130 / 143; an existing output is replaced only with --force; a file
// output given a folder writes its default name inside it. Interrupted mid-simulation,
// mid-replay and mid-sweep.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cli_support.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

namespace fs = std::filesystem;

/// Starts `loom ARGS` (stdout and stderr to `log`), waits until `ready()` holds (or 60 s),
/// `delay_s` more, sends `sig` and returns the exit status as a shell reports it.
template <class Ready>
int interrupt_loom(const std::vector<std::string>& args, const std::string& log, int sig,
                   Ready ready, double delay_s) {
  const pid_t pid = fork();
  if (pid == 0) {
    freopen(log.c_str(), "w", stdout);
    dup2(fileno(stdout), STDERR_FILENO);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    std::vector<char*> argv{const_cast<char*>(LOOM_BINARY)};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(LOOM_BINARY, argv.data());
    _exit(127);
  }
  const auto start = std::chrono::steady_clock::now();
  while (!ready() && std::chrono::steady_clock::now() - start < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::this_thread::sleep_for(std::chrono::duration<double>(delay_s));
  kill(pid, sig);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/// Names in `dir` that start with '.' (staging or half-swapped outputs).
std::vector<std::string> hidden_entries(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with(".")) out.push_back(name);
  }
  return out;
}

bool has_staging(const fs::path& dir) {
  return fs::exists(dir) && !hidden_entries(dir).empty();
}

void expect_identical_folders(const fs::path& a, const fs::path& b) {
  size_t files = 0;
  for (const auto& e : fs::recursive_directory_iterator(a)) {
    if (!e.is_regular_file()) continue;
    ++files;
    const fs::path other = b / fs::relative(e.path(), a);
    EXPECT_EQ(test::slurp(e.path()), test::slurp(other)) << other;
  }
  EXPECT_GT(files, 0u);
}

std::string config(const std::string& relative) {
  return test::source_path(relative);
}

/// Interrupts `loom ARGS --out ROOT/b` with SIGINT, then SIGTERM, `delay_s` after its
/// staging folder appears and its log has printed `started` (a progress line of the phase
/// to interrupt; empty: the staging alone): each run exits 128 + signal, says
/// "interrupted" and leaves no staging and no output. Then two full runs (`-q`, into
/// ROOT/a and ROOT/b) must write byte-identical folders.
void expect_clean_interrupts_and_identical_reruns(const std::vector<std::string>& args,
                                                  const test::TempDir& dir, double delay_s,
                                                  const std::string& started = "") {
  const fs::path root = dir.path("runs");
  fs::create_directories(root);
  for (const int sig : {SIGINT, SIGTERM}) {
    std::vector<std::string> interrupted = args;
    interrupted.insert(interrupted.end(), {"--out", (root / "b").string()});
    const int code = interrupt_loom(
        interrupted, dir.path("log"), sig,
        [&] {
          return has_staging(root) &&
                 test::slurp(dir.path("log")).find(started) != std::string::npos;
        },
        delay_s);
    EXPECT_EQ(code, 128 + sig) << test::slurp(dir.path("log"));
    EXPECT_NE(test::slurp(dir.path("log")).find("interrupted"), std::string::npos);
    EXPECT_TRUE(hidden_entries(root).empty()) << hidden_entries(root).front();
    EXPECT_FALSE(fs::exists(root / "b"));
  }
  std::string command;
  for (const std::string& a : args) command += a + " ";
  for (const char* out : {"a", "b"}) {
    const test::CliResult r = test::run_loom(command + "-q --out " + (root / out).string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  expect_identical_folders(root / "a", root / "b");
}

}  // namespace

TEST(OutputContract, InterruptedSimLeavesNoStagingAndARerunIsByteIdentical) {
  // 16 x 128 ranks through SimGrid, unfolded, signalled as SimGrid starts (its progress
  // line), not after a fixed delay that a faster machine outruns (16 x 64 finished before a
  // signal 0.5 s after staging on 2026-12-05): SimGrid's part alone lasts about a second.
  const test::TempDir dir;
  expect_clean_interrupts_and_identical_reruns(
      {"sim", config("configs/bench/pp16-dp64.toml"), "--no-plot", "--no-fold", "--set",
       "parallel.dp=128", "--set", "cluster.nodes=256"},
      dir, 0.1, "with SimGrid ...");
}

TEST(OutputContract, InterruptedReplayLeavesNoStagingAndARerunIsByteIdentical) {
  // Oobleck over 6 h of churn on 1,000 nodes: a few seconds, so the signals land mid-replay.
  const test::TempDir dir;
  const std::string trace = dir.path("churn.csv");
  const test::CliResult generated = test::run_loom(
      "trace generate --kind poisson --nodes 1000 --rate 60 --rejoin 10min --duration 6h "
      "--out " +
      trace);
  ASSERT_EQ(generated.exit_code, 0) << generated.output;
  expect_clean_interrupts_and_identical_reruns(
      {"replay", config("configs/paper/oobleck-gpt3-1.3b.toml"), "--trace", trace, "--policy",
       "oobleck", "--set", "cluster.nodes=1000"},
      dir, 0.5);
}

TEST(OutputContract, InterruptedSweepResumesToIdenticalResults) {
  const test::TempDir dir;
  const std::string study =
      dir.write("study.toml", "base = \"" + config("configs/bench/pp16-dp64.toml") +
                                  "\"\nschedulers = [\"1f1b\"]\nbackend = \"simgrid\"\n"
                                  "[axes]\n\"schedule.microbatches\" = [16, 32, 48]\n"
                                  // unfolded: seconds per point, so the signal lands mid-sweep
                                  "\"sim.fold\" = [false]\n");
  const fs::path results = dir.path("int/results.csv");
  // Interrupted once the first point's row is in: the pool stops, the rows stay.
  const int code = interrupt_loom(
      {"sweep", study, "-j", "1", "--out", dir.path("int")}, dir.path("log"), SIGINT,
      [&] {
        return test::slurp(results).find("\nok") != std::string::npos ||
               test::slurp(results).find(",ok,") != std::string::npos;
      },
      0.5);
  EXPECT_EQ(code, 130) << test::slurp(dir.path("log"));
  EXPECT_TRUE(hidden_entries(dir.path("int")).empty());
  const test::CliResult resumed =
      test::run_loom("sweep " + study + " -j 1 --resume --out " + dir.path("int"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const test::CliResult full = test::run_loom("sweep " + study + " -j 2 --out " + dir.path("full"));
  ASSERT_EQ(full.exit_code, 0) << full.output;
  expect_identical_folders(dir.path("full"), dir.path("int"));
}

TEST(OutputContract, AnEarlierOutputIsReplacedOnlyWithForce) {
  const test::TempDir dir;
  const std::string sim = "sim " + config("configs/examples/uniform-1f1b.toml") + " --no-plot -q ";
  // Parents are created.
  const std::string out = dir.path("deep/er/out");
  ASSERT_EQ(test::run_loom(sim + "--out " + out).exit_code, 0);
  test::expect_exit(sim + "--out " + out, 2, {"--out", "earlier run", "--force"});
  EXPECT_EQ(test::run_loom(sim + "--force --out " + out).exit_code, 0);
  EXPECT_TRUE(hidden_entries(dir.path("deep/er")).empty());
  // A folder that is not a Loom output is never replaced, --force or not.
  dir.write("mine.txt", "");
  fs::create_directories(dir.path("src"));
  dir.write("src/main.cpp", "int main() {}\n");
  test::expect_exit(sim + "--force --out " + dir.path("src"), 2, {"not a Loom output folder"});
  EXPECT_TRUE(fs::exists(dir.path("src/main.cpp")));
  // An empty folder is fine; a file in the way is not.
  fs::create_directories(dir.path("empty"));
  EXPECT_EQ(test::run_loom(sim + "--out " + dir.path("empty")).exit_code, 0);
  test::expect_exit(sim + "--out " + dir.path("mine.txt") + "/sub", 2,
                    {"cannot create the folder"});
}

TEST(OutputContract, FileOutputsGivenAFolderWriteTheirDefaultName) {
  const test::TempDir dir;
  fs::create_directories(dir.path("traces"));
  const test::CliResult trace = test::run_loom(
      "trace generate --kind periodic --interval 10min --failures 3 --nodes 4 --seed 1 --out " +
      dir.path("traces"));
  EXPECT_EQ(trace.exit_code, 0) << trace.output;
  EXPECT_TRUE(fs::exists(dir.path("traces/trace.csv")));
  const test::CliResult profile =
      test::run_loom("profile " + config("configs/exec/vlm-host.toml") +
                     " --tokens 8 --repeats 1 -q --out " + dir.path("new/folder/"));
  EXPECT_EQ(profile.exit_code, 0) << profile.output;
  EXPECT_TRUE(fs::exists(dir.path("new/folder/profile.csv")));
  const test::CliResult schedule =
      test::run_loom("schedule export " + config("configs/examples/uniform-1f1b.toml") + " --out " +
                     dir.path("traces"));
  EXPECT_EQ(schedule.exit_code, 0) << schedule.output;
  EXPECT_TRUE(fs::exists(dir.path("traces/schedule.txt")));
  EXPECT_TRUE(hidden_entries(dir.path("traces")).empty());
}

TEST(OutputContract, ComparePngIntoAMissingFolderIsAnError) {
  const test::TempDir dir;
  fs::create_directories(dir.path("a"));
  test::expect_exit("compare " + dir.path("a") + " " + dir.path("a") + " --png " +
                        dir.path("missing/compare.png"),
                    2, {"--png", "does not exist"});
  test::expect_exit("compare " + dir.path("a") + " " + dir.path("a") + " --png " + dir.path("a"), 2,
                    {"--png", "is a folder"});
}

}  // namespace loom
