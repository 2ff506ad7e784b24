#include "app/sweep/pool.hpp"

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
#include <deque>
#include <span>
#include <stdexcept>
#include <utility>

namespace loom::sweep {
namespace {

volatile std::sig_atomic_t g_stop = 0;

extern "C" void on_stop_signal(int) {
  g_stop = 1;
}

/// Worker protocol: the parent writes a job index (size_t) to `to_worker`; the worker
/// answers on `from_worker` with a size_t length and the message. EOF on `to_worker`
/// ends the worker. Both ends are this binary (fork, no exec), so native sizes agree.
struct Worker {
  pid_t pid = -1;  ///< -1 once reaped (then dropped from the pool)
  int to_worker = -1;
  int from_worker = -1;
  std::deque<size_t> jobs;  ///< sent to it, not answered yet (the first is running)
};

/// Jobs queued per reused worker: with two, a worker starts its next job while the parent
/// handles the last result, so ~1 ms evaluator points do not wait for the parent.
constexpr size_t kQueueDepth = 2;

bool write_all(int fd, std::span<const std::byte> bytes) {
  while (!bytes.empty()) {
    const ssize_t n = write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes = bytes.subspan(static_cast<size_t>(n));
  }
  return true;
}

/// Fills `bytes` exactly; false at end of file or on error.
bool read_all(int fd, std::span<std::byte> bytes) {
  while (!bytes.empty()) {
    const ssize_t n = read(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes = bytes.subspan(static_cast<size_t>(n));
  }
  return true;
}

[[noreturn]] void worker_loop(int in, int out, bool fresh_process, const JobFn& job) {
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  // Library code does not print, but SimGrid logs: keep the parent's terminal clean.
  const int null = open("/dev/null", O_WRONLY);
  if (null >= 0) {
    dup2(null, STDOUT_FILENO);
    dup2(null, STDERR_FILENO);
  }
  size_t index = 0;
  while (read_all(in, std::as_writable_bytes(std::span(&index, 1)))) {
    std::string message;
    try {
      message = job(index);
    } catch (...) {
      _exit(1);
    }
    const size_t size = message.size();
    if (!write_all(out, std::as_bytes(std::span(&size, 1))) ||
        !write_all(out, std::as_bytes(std::span(message))))
      _exit(1);
    if (fresh_process) break;
  }
  _exit(0);
}

Worker spawn(bool fresh_process, const JobFn& job, const std::vector<Worker>& others) {
  int down[2], up[2];
  if (pipe2(down, O_CLOEXEC) != 0 || pipe2(up, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    // Siblings' pipes must not stay open here, or a sibling would never see EOF.
    for (const Worker& w : others) {
      close(w.to_worker);
      close(w.from_worker);
    }
    close(down[1]);
    close(up[0]);
    worker_loop(down[0], up[1], fresh_process, job);
  }
  close(down[0]);
  close(up[1]);
  Worker w;
  w.pid = pid;
  w.to_worker = down[1];
  w.from_worker = up[0];
  return w;
}

std::string how_it_died(int status) {
  if (WIFSIGNALED(status))
    return "worker process died: signal " + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  return "worker process exited with status " + std::to_string(WEXITSTATUS(status)) +
         " without a result";
}

int reap(pid_t pid, bool terminate) {
  if (terminate) kill(pid, SIGTERM);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

void close_worker(Worker& w) {
  close(w.to_worker);
  close(w.from_worker);
}

}  // namespace

int core_count() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
}

bool run_pool(size_t count, int jobs, bool fresh_process, const JobFn& job, const DoneFn& done) {
  g_stop = 0;
  struct sigaction action {};
  action.sa_handler = on_stop_signal;  // no SA_RESTART: poll returns EINTR
  sigemptyset(&action.sa_mask);
  struct sigaction old_int {
  }, old_term{}, old_pipe{};
  sigaction(SIGINT, &action, &old_int);
  sigaction(SIGTERM, &action, &old_term);
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ignore, &old_pipe);  // a dead worker's pipe: an error, not a signal
  std::vector<Worker> workers;
  std::deque<size_t> pending;  // jobs to hand out, in order
  for (size_t i = 0; i < count; ++i) pending.push_back(i);
  size_t finished = 0;
  const int width = std::max(1, jobs);  // workers at most (and at most `count`)
  const size_t depth = fresh_process ? 1 : kQueueDepth;
  while (!g_stop && finished < count) {
    // Keep `width` workers with queued jobs while jobs remain.
    while (!g_stop && !pending.empty() && workers.size() < count &&
           std::cmp_less(workers.size(), width))
      workers.push_back(spawn(fresh_process, job, workers));
    for (Worker& w : workers) {
      while (w.jobs.size() < depth && !pending.empty()) {
        const size_t index = pending.front();
        if (!write_all(w.to_worker, std::as_bytes(std::span(&index, 1))))
          break;  // dead: found below
        w.jobs.push_back(index);
        pending.pop_front();
      }
    }
    std::vector<pollfd> polls;
    for (const Worker& w : workers) polls.push_back({w.from_worker, POLLIN, 0});
    if (poll(polls.data(), polls.size(), -1) < 0) continue;  // EINTR: check g_stop
    for (size_t i = workers.size(); i-- > 0;) {
      if (!(polls[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Worker& w = workers[i];
      size_t size = 0;
      std::string message;
      bool answered = read_all(w.from_worker, std::as_writable_bytes(std::span(&size, 1)));
      if (answered) {
        message.resize(size);
        answered = read_all(w.from_worker, std::as_writable_bytes(std::span(message)));
      }
      if (answered && !w.jobs.empty()) {
        const size_t j = w.jobs.front();
        w.jobs.pop_front();
        ++finished;
        if (!g_stop) done(j, true, message);
        if (!fresh_process) continue;
      }
      // The worker is gone (a fresh-process worker after its job, or a crash): the job it
      // was running failed; the ones queued behind it go to another worker.
      close_worker(w);
      const int status = reap(w.pid, false);
      if (!w.jobs.empty() && !g_stop) {
        ++finished;
        done(w.jobs.front(), false, how_it_died(status));
        w.jobs.pop_front();
      }
      pending.insert(pending.begin(), w.jobs.begin(), w.jobs.end());
      w.pid = -1;
    }
    // Reaped workers leave after the round (the others keep their order).
    std::erase_if(workers, [](const Worker& w) { return w.pid < 0; });
  }
  const bool complete = !g_stop;
  for (Worker& w : workers) close_worker(w);  // EOF ends idle workers
  for (Worker& w : workers) reap(w.pid, !w.jobs.empty());
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGPIPE, &old_pipe, nullptr);
  return complete;
}

}  // namespace loom::sweep
