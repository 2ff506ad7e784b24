// `loom sweep --slurm` on a real Slurm: a single-node cluster (scripts/start_slurm.sh,
// which .ci/run also calls) runs a 4-task job array of a small study, and the merged shards
// equal the local run byte for byte. Where Slurm cannot start, this test is skipped with the
// reason and nothing else is.
#include <gtest/gtest.h>

#include "cli_support.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

using test::run_loom;
using test::slurp;

/// Output and exit code of a shell command.
test::CliResult shell(const std::string& command) {
  test::CliResult r;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, pipe)) r.output.append(buf, n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

TEST(SweepSlurm, FourTaskJobArrayMergesToTheLocalRun) {
  test::TempDir dir;
  const std::string status_file = dir.path("slurm-status");
  // Starts the daemons if Slurm is installed but not running; never installs anything.
  shell("LOOM_SLURM_STATUS=" + status_file + " bash " +
        test::source_path("scripts/start_slurm.sh") + " --no-install");
  const std::string status = slurp(status_file);
  if (status.rfind("ok", 0) != 0) {
    GTEST_SKIP() << "Slurm is not available here: "
                 << (status.empty() ? "scripts/start_slurm.sh wrote no status" : status);
  }
  const std::string study = dir.write(
      "study.toml", "base = \"" + test::source_path("configs/examples/uniform-1f1b.toml") +
                        "\"\n"
                        "schedulers = [\"1f1b\", \"gpipe\", \"zb-h1\"]\n"
                        "[axes]\n"
                        "\"schedule.microbatches\" = [4, 8, 16]\n"
                        "\"parallel.pp\" = [2, 4]\n");
  ASSERT_EQ(run_loom("sweep " + study + " -q --out " + dir.path("local")).exit_code, 0);
  const auto w = run_loom("sweep " + study + " --slurm --tasks 4 --out " + dir.path("cluster"));
  ASSERT_EQ(w.exit_code, 0) << w.output;
  const auto job = shell("timeout 300 sbatch --wait " + dir.path("cluster") + "/sweep.sbatch");
  ASSERT_EQ(job.exit_code, 0) << job.output
                              << shell("cat " + dir.path("cluster") + "/slurm-*.out").output;
  std::string shards;
  for (int i = 0; i < 4; ++i) shards += " " + dir.path("cluster") + "/shard-" + std::to_string(i);
  const auto m = run_loom("sweep merge" + shards + " --out " + dir.path("merged"));
  ASSERT_EQ(m.exit_code, 0) << m.output;
  EXPECT_NE(m.output.find("18 of 18 points"), std::string::npos) << m.output;
  EXPECT_EQ(slurp(dir.path("merged") + "/results.csv"), slurp(dir.path("local") + "/results.csv"));
  EXPECT_EQ(slurp(dir.path("merged") + "/results.json"),
            slurp(dir.path("local") + "/results.json"));
}

}  // namespace
}  // namespace loom
