// Bootstrap of the cuda backend's process group, without GPUs: launcher environments,
// the TCP and file broadcasts of rank 0's id between threads acting as ranks, timeouts.
#include "executor/cuda/bootstrap.hpp"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "core/errors.hpp"
#include "executor/backend.hpp"

namespace loom::exec::cuda {
namespace {

const char* const kVars[] = {"RANK",
                             "WORLD_SIZE",
                             "LOCAL_RANK",
                             "OMPI_COMM_WORLD_RANK",
                             "OMPI_COMM_WORLD_SIZE",
                             "OMPI_COMM_WORLD_LOCAL_RANK",
                             "PMI_RANK",
                             "PMI_SIZE",
                             "MPI_LOCALRANKID",
                             "SLURM_PROCID",
                             "SLURM_NTASKS",
                             "SLURM_LOCALID",
                             "MASTER_ADDR",
                             "MASTER_PORT",
                             "LOOM_RENDEZVOUS_FILE"};

/// Clears every launcher variable before and after each test.
class Env : public ::testing::Test {
 protected:
  void SetUp() override { clear(); }
  void TearDown() override { clear(); }
  static void clear() {
    for (const char* v : kVars) ::unsetenv(v);
  }
};

/// A TCP port nothing listens on right now (bind to 0, read it back, close).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

/// Runs `world` ranks on threads; returns what each got.
std::vector<std::vector<char>> broadcast_on_threads(LaunchInfo base, int world) {
  const std::vector<char> id = {'n', 'c', 'c', 'l', '-', 'i', 'd', '\0', '\x7f'};
  std::vector<std::vector<char>> got(static_cast<size_t>(world));
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r)
    ranks.emplace_back([&, r] {
      LaunchInfo info = base;
      info.rank = r;
      info.world_size = world;
      got[static_cast<size_t>(r)] =
          broadcast_from_rank0(info, r == 0 ? id : std::vector<char>{}, 10.0);
    });
  for (std::thread& t : ranks) t.join();
  for (const auto& g : got) EXPECT_EQ(g, id);
  return got;
}

TEST_F(Env, NoLauncherMeansOneProcess) {
  const LaunchInfo info = launch_info_from_env();
  EXPECT_EQ(info.rank, 0);
  EXPECT_EQ(info.world_size, 1);
  EXPECT_EQ(info.master_addr, "127.0.0.1");
  EXPECT_EQ(info.master_port, 29500);
  EXPECT_TRUE(info.rendezvous_file.empty());
}

TEST_F(Env, ReadsTorchrunMpirunAndSrunConventions) {
  ::setenv("RANK", "2", 1);
  ::setenv("WORLD_SIZE", "4", 1);
  ::setenv("LOCAL_RANK", "1", 1);
  ::setenv("MASTER_ADDR", "node7", 1);
  ::setenv("MASTER_PORT", "1234", 1);
  LaunchInfo info = launch_info_from_env();
  EXPECT_EQ(info.rank, 2);
  EXPECT_EQ(info.world_size, 4);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.master_addr, "node7");
  EXPECT_EQ(info.master_port, 1234);
  clear();
  ::setenv("OMPI_COMM_WORLD_RANK", "3", 1);
  ::setenv("OMPI_COMM_WORLD_SIZE", "8", 1);
  info = launch_info_from_env("/tmp/x");
  EXPECT_EQ(info.rank, 3);
  EXPECT_EQ(info.world_size, 8);
  EXPECT_EQ(info.local_rank, 3);  // no local rank given: the global one
  EXPECT_EQ(info.rendezvous_file, "/tmp/x");
  clear();
  ::setenv("SLURM_PROCID", "5", 1);
  ::setenv("SLURM_NTASKS", "6", 1);
  ::setenv("SLURM_LOCALID", "1", 1);
  info = launch_info_from_env();
  EXPECT_EQ(info.rank, 5);
  EXPECT_EQ(info.world_size, 6);
  EXPECT_EQ(info.local_rank, 1);
}

TEST_F(Env, MalformedVariablesAreInputErrorsNamingThem) {
  ::setenv("RANK", "4", 1);
  ::setenv("WORLD_SIZE", "4", 1);
  try {
    launch_info_from_env();
    FAIL() << "rank 4 of 4 accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("RANK"), std::string::npos) << e.what();
  }
  ::setenv("RANK", "0", 1);
  ::setenv("MASTER_PORT", "http", 1);
  EXPECT_THROW(launch_info_from_env(), InputError);
}

TEST(Bootstrap, TcpBroadcastReachesEveryRank) {
  LaunchInfo base;
  base.master_port = free_port();
  broadcast_on_threads(base, 4);
}

TEST(Bootstrap, FileRendezvousReachesEveryRankAndRefusesAStaleFile) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("loom-rdv-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  LaunchInfo base;
  base.rendezvous_file = (dir / "id").string();
  broadcast_on_threads(base, 3);
  base.world_size = 2;  // rank 0 again, the file is still there
  EXPECT_THROW(broadcast_from_rank0(base, {'x'}, 1.0), InputError);
  std::filesystem::remove_all(dir);
}

TEST(Bootstrap, ReleasedRendezvousLetsTheNextIterationMeetThroughTheSamePath) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("loom-rdv2-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  LaunchInfo base;
  base.rendezvous_file = (dir / "id").string();
  base.world_size = 2;
  for (int iteration = 0; iteration < 3; ++iteration) {  // loom exec --iterations 3
    broadcast_on_threads(base, 2);
    LaunchInfo other = base;
    other.rank = 1;
    release_rendezvous(other);  // not rank 0: leaves the file
    EXPECT_TRUE(std::filesystem::exists(base.rendezvous_file));
    release_rendezvous(base);  // rank 0, after the collective setup
    EXPECT_FALSE(std::filesystem::exists(base.rendezvous_file));
  }
  release_rendezvous(base);  // already gone: fine
  std::filesystem::remove_all(dir);
}

TEST(Bootstrap, AMissingRankZeroTimesOutNamingTheRank) {
  LaunchInfo info;
  info.rank = 1;
  info.world_size = 2;
  info.master_port = free_port();
  try {
    broadcast_from_rank0(info, {}, 0.3);
    FAIL() << "no rank 0, yet the broadcast returned";
  } catch (const ExecError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace loom::exec::cuda
