#include "cli/sweep/pool.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <stdexcept>

namespace loom::sweep {
namespace {

volatile std::sig_atomic_t g_stop = 0;

extern "C" void on_stop_signal(int) {
  g_stop = 1;
}

struct Running {
  pid_t pid = -1;
  int fd = -1;
  size_t job = 0;
  std::string message;
};

/// In the child: run the job, send its message, never return.
[[noreturn]] void child(size_t index, int fd, const JobFn& job) {
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  // Library code does not print, but SimGrid logs: keep the parent's terminal clean.
  const int null = open("/dev/null", O_WRONLY);
  if (null >= 0) {
    dup2(null, STDOUT_FILENO);
    dup2(null, STDERR_FILENO);
  }
  try {
    const std::string message = job(index);
    for (size_t sent = 0; sent < message.size();) {
      const ssize_t n = write(fd, message.data() + sent, message.size() - sent);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) _exit(1);
      sent += static_cast<size_t>(n);
    }
    _exit(0);
  } catch (...) {
    _exit(1);
  }
}

std::string how_it_died(int status) {
  if (WIFSIGNALED(status))
    return "worker process died: signal " + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  return "worker process exited with status " + std::to_string(WEXITSTATUS(status)) +
         " without a result";
}

void start(size_t index, const JobFn& job, std::vector<Running>& running) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    close(fds[0]);
    child(index, fds[1], job);
  }
  close(fds[1]);
  running.push_back({pid, fds[0], index, {}});
}

void terminate_all(std::vector<Running>& running) {
  for (Running& r : running) kill(r.pid, SIGTERM);
  for (Running& r : running) {
    int status = 0;
    while (waitpid(r.pid, &status, 0) < 0 && errno == EINTR) {
    }
    close(r.fd);
  }
  running.clear();
}

/// Reads `r` to end of file: a child writes its whole message and exits, so this blocks
/// for that child only briefly.
void drain(Running& r) {
  char buf[4096];
  for (;;) {
    const ssize_t n = read(r.fd, buf, sizeof buf);
    if (n > 0) {
      r.message.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return;
  }
}

}  // namespace

int core_count() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
}

bool run_pool(size_t count, int jobs, const JobFn& job, const DoneFn& done) {
  g_stop = 0;
  struct sigaction action {};
  action.sa_handler = on_stop_signal;  // no SA_RESTART: poll returns EINTR
  sigemptyset(&action.sa_mask);
  struct sigaction old_int {
  }, old_term{};
  sigaction(SIGINT, &action, &old_int);
  sigaction(SIGTERM, &action, &old_term);
  std::vector<Running> running;
  size_t next = 0;
  while (!g_stop && (next < count || !running.empty())) {
    while (!g_stop && next < count && running.size() < static_cast<size_t>(std::max(1, jobs)))
      start(next++, job, running);
    std::vector<pollfd> polls;
    for (const Running& r : running) polls.push_back({r.fd, POLLIN, 0});
    if (poll(polls.data(), polls.size(), -1) < 0) continue;  // EINTR: check g_stop
    for (size_t i = running.size(); i-- > 0;) {
      if (!(polls[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Running& r = running[i];
      drain(r);
      close(r.fd);
      int status = 0;
      while (waitpid(r.pid, &status, 0) < 0 && errno == EINTR) {
      }
      const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0 && !r.message.empty();
      Running finished = std::move(r);
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
      // A child killed by the same Ctrl-C is not a failed point: drop it.
      if (g_stop) continue;
      done(finished.job, ok, ok ? finished.message : how_it_died(status));
    }
  }
  const bool complete = !g_stop;
  terminate_all(running);
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  return complete;
}

}  // namespace loom::sweep
