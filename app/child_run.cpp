#include "app/child_run.hpp"

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <stdexcept>

#include "core/errors.hpp"

namespace loom {
namespace {

void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n <= 0) return;  // the parent is gone: nobody to answer
    done += static_cast<size_t>(n);
  }
}

/// The child's side: one reply, its first byte the outcome ('O' ok, 'I' infeasible, 'E'
/// input error, 'X' anything else), the rest the result or the message.
[[noreturn]] void answer(int fd, const std::function<std::string()>& work) {
  std::string reply;
  try {
    reply = "O" + work();
  } catch (const InfeasibleError& e) {
    reply = std::string("I") + e.what();
  } catch (const InputError& e) {
    reply = std::string("E") + e.what();
  } catch (const std::exception& e) {
    reply = std::string("X") + e.what();
  }
  write_all(fd, reply);
  std::fflush(nullptr);
  _exit(0);
}

/// Reads the child's reply to its end, calling `poll` between waits of 100 ms. If `poll`
/// throws, kills the child, reaps it and rethrows.
std::string collect(int fd, pid_t pid, const std::function<void()>& poll_fn) {
  std::string reply;
  char buf[1 << 16];
  for (;;) {
    if (poll_fn) {
      pollfd p{fd, POLLIN, 0};
      // 0: timed out; -1: a signal interrupted the wait (EINTR), which is poll_fn's to see.
      if (::poll(&p, 1, 100) <= 0) {
        try {
          poll_fn();
        } catch (...) {
          kill(pid, SIGKILL);
          close(fd);
          waitpid(pid, nullptr, 0);
          throw;
        }
        continue;
      }
    }
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    reply.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return reply;
}

}  // namespace

std::string run_in_child(const std::function<std::string()>& work,
                         const std::function<void()>& poll) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("pipe() failed");
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    throw std::runtime_error("fork() failed");
  }
  if (pid == 0) {
    close(fds[0]);
    answer(fds[1], work);
  }
  close(fds[1]);
  const std::string reply = collect(fds[0], pid, poll);
  if (reply.empty()) throw std::runtime_error("the child process running the simulation died");
  std::string message = reply.substr(1);
  switch (reply[0]) {
    case 'O':
      return message;
    case 'I':
      throw InfeasibleError(message);
    case 'E':
      throw InputError(message);
    default:
      throw std::runtime_error(message);
  }
}

}  // namespace loom
