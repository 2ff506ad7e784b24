#include "executor/cuda/bootstrap.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <system_error>
#include <thread>

#include "core/errors.hpp"
#include "executor/backend.hpp"

namespace loom::exec::cuda {
namespace {

using Clock = std::chrono::steady_clock;

std::optional<std::string> env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

int env_int(const char* name, int fallback, int lo, int hi) {
  const std::optional<std::string> value = env(name);
  if (!value) return fallback;
  char* end = nullptr;
  errno = 0;
  const long parsed = std::strtol(value->c_str(), &end, 10);
  if (errno != 0 || end == value->c_str() || *end != '\0' || parsed < lo || parsed > hi)
    throw InputError("environment variable " + std::string(name) + ": must be an integer from " +
                     std::to_string(lo) + " to " + std::to_string(hi) + ", got '" + *value + "'");
  return static_cast<int>(parsed);
}

/// Closes a socket on scope exit.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

[[noreturn]] void fail(const LaunchInfo& info, const std::string& what) {
  throw ExecError("rank " + std::to_string(info.rank) + " bootstrap: " + what);
}

double left_ms(Clock::time_point deadline) {
  return std::chrono::duration<double, std::milli>(deadline - Clock::now()).count();
}

void send_all(const LaunchInfo& info, int fd, const std::vector<char>& blob) {
  const auto size = static_cast<std::uint32_t>(blob.size());
  std::vector<char> frame(sizeof size);
  std::memcpy(frame.data(), &size, sizeof size);
  frame.insert(frame.end(), blob.begin(), blob.end());
  size_t sent = 0;
  while (sent < frame.size()) {
    const ssize_t n = ::send(fd, frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) fail(info, std::string("send to a peer failed: ") + std::strerror(errno));
    sent += static_cast<size_t>(n);
  }
}

bool recv_exact(int fd, char* out, size_t bytes, Clock::time_point deadline) {
  size_t got = 0;
  while (got < bytes) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::max(0.0, left_ms(deadline)))) <= 0) return false;
    const ssize_t n = ::recv(fd, out + got, bytes - got, 0);
    if (n <= 0) return false;
    got += static_cast<size_t>(n);
  }
  return true;
}

std::vector<char> serve_tcp(const LaunchInfo& info, const std::vector<char>& blob,
                            Clock::time_point deadline) {
  Fd server(::socket(AF_INET, SOCK_STREAM, 0));
  if (server.fd < 0) fail(info, std::string("socket: ") + std::strerror(errno));
  const int on = 1;
  ::setsockopt(server.fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<std::uint16_t>(info.master_port));
  if (::bind(server.fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(server.fd, info.world_size) != 0)
    fail(info, "cannot listen on MASTER_PORT " + std::to_string(info.master_port) + ": " +
                   std::strerror(errno));
  for (int served = 1; served < info.world_size; ++served) {
    pollfd p{server.fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::max(0.0, left_ms(deadline)))) <= 0)
      fail(info, "timed out with " + std::to_string(served - 1) + " of " +
                     std::to_string(info.world_size - 1) + " ranks connected on port " +
                     std::to_string(info.master_port));
    Fd peer(::accept(server.fd, nullptr, nullptr));
    if (peer.fd < 0) fail(info, std::string("accept: ") + std::strerror(errno));
    send_all(info, peer.fd, blob);
  }
  return blob;
}

std::vector<char> fetch_tcp(const LaunchInfo& info, Clock::time_point deadline) {
  const std::string where = info.master_addr + ":" + std::to_string(info.master_port);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(info.master_addr.c_str(), std::to_string(info.master_port).c_str(), &hints,
                    &found) != 0 ||
      found == nullptr)
    fail(info, "cannot resolve MASTER_ADDR " + info.master_addr);
  while (true) {  // rank 0 may not listen yet: retry until the deadline
    Fd fd(::socket(AF_INET, SOCK_STREAM, 0));
    if (fd.fd >= 0 && ::connect(fd.fd, found->ai_addr, found->ai_addrlen) == 0) {
      std::uint32_t size = 0;
      std::vector<char> blob;
      if (recv_exact(fd.fd, reinterpret_cast<char*>(&size), sizeof size, deadline)) {
        blob.resize(size);
        if (recv_exact(fd.fd, blob.data(), size, deadline)) {
          ::freeaddrinfo(found);
          return blob;
        }
      }
    }
    if (left_ms(deadline) <= 0) {
      ::freeaddrinfo(found);
      fail(info, "timed out connecting to rank 0 at " + where);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

std::vector<char> via_file(const LaunchInfo& info, const std::vector<char>& blob,
                           Clock::time_point deadline) {
  namespace fs = std::filesystem;
  const fs::path path(info.rendezvous_file);
  if (info.rank == 0) {
    if (fs::exists(path))
      throw InputError("--rendezvous " + path.string() +
                       ": the file exists already (left by an earlier run?); remove it or use a "
                       "fresh path, or the other ranks may read a stale id");
    const fs::path tmp = path.string() + ".tmp" + std::to_string(::getpid());
    {
      std::ofstream out(tmp, std::ios::binary);
      out.write(blob.data(), static_cast<std::streamsize>(blob.size()));
      if (!out) fail(info, "cannot write " + tmp.string());
    }
    fs::rename(tmp, path);  // atomic: readers see nothing or the whole id
    return blob;
  }
  while (true) {
    std::ifstream in(path, std::ios::binary);
    if (in) return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    if (left_ms(deadline) <= 0) fail(info, "timed out waiting for " + path.string());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

LaunchInfo launch_info_from_env(const std::string& rendezvous_file) {
  LaunchInfo info;
  // (rank, size, local rank) variable names per launcher, first present wins.
  const char* const kConventions[][3] = {
      {"RANK", "WORLD_SIZE", "LOCAL_RANK"},
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
      {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
      {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"}};
  for (const auto& names : kConventions) {
    if (!env(names[0])) continue;
    info.world_size = env_int(names[1], 1, 1, 1 << 20);
    info.rank = env_int(names[0], 0, 0, info.world_size - 1);
    info.local_rank = env_int(names[2], info.rank, 0, 1 << 20);
    break;
  }
  info.master_addr = env("MASTER_ADDR").value_or("127.0.0.1");
  info.master_port = env_int("MASTER_PORT", 29500, 1, 65535);
  info.rendezvous_file =
      rendezvous_file.empty() ? env("LOOM_RENDEZVOUS_FILE").value_or("") : rendezvous_file;
  return info;
}

std::vector<char> broadcast_from_rank0(const LaunchInfo& info, const std::vector<char>& blob,
                                       double timeout_s) {
  if (info.world_size == 1) return blob;
  const Clock::time_point deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                        std::chrono::duration<double>(timeout_s));
  if (!info.rendezvous_file.empty()) return via_file(info, blob, deadline);
  return info.rank == 0 ? serve_tcp(info, blob, deadline) : fetch_tcp(info, deadline);
}

void release_rendezvous(const LaunchInfo& info) {
  if (info.rank != 0 || info.world_size == 1 || info.rendezvous_file.empty()) return;
  std::error_code ignored;  // already gone is fine: the goal is only that it not exist
  std::filesystem::remove(info.rendezvous_file, ignored);
}

}  // namespace loom::exec::cuda
