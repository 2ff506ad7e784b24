// Table A3 "1B+7B, 64K, 75% vision, 32 GPUs" in SimGrid (heterogeneous-parallelism-megatron
// App. A.1): colocated heterogeneous (C) is faster than the homogeneous layout (H).
// SimGrid runs one simulation per process, so H runs in a forked child that reports its
// iteration time through a pipe.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sim/simgrid_backend.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

double simulate(const std::string& config) {
  const auto study = prepare_study(test::source_path("configs/paper/" + config), {});
  return run_simgrid(study->schedule, study->config.cluster).iteration_time_s();
}

/// Runs simulate(config) in a child process (a fresh SimGrid engine).
double simulate_in_child(const std::string& config) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    double t = -1;
    try {
      t = simulate(config);
    } catch (...) {
    }
    const ssize_t n = write(fds[1], &t, sizeof t);
    _exit(n == sizeof t ? 0 : 1);
  }
  close(fds[1]);
  double t = -1;
  const ssize_t n = read(fds[0], &t, sizeof t);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return n == sizeof t ? t : -1;
}

TEST(HeteroSimGrid, TableA3ColocatedIsFasterThanHomogeneous) {
  const double h = simulate_in_child("hetero-1b7b-64k-v75-homogeneous.toml");
  ASSERT_GT(h, 0) << "the homogeneous simulation failed";
  const double c = simulate("hetero-1b7b-64k-v75-colocated.toml");
  EXPECT_LT(c, h);
  // Paper: +49.3 % (F+B 4,457 -> 2,973 ms); Loom's H runs its encoder whole on every CP
  // rank as Megatron-LM does, so the gain is of the paper's size (+66.2 %: Loom's C is
  // 0.85x the paper's time at 64K, so a similar H - C is a larger share;
  // docs/heterogeneous.md).
  EXPECT_GT(h / c - 1, 0.40);
}

}  // namespace
}  // namespace loom
