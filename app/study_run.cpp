#include "app/study_run.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "app/backends.hpp"
#include "app/study.hpp"
#include "core/errors.hpp"

namespace loom {
namespace {

double run_here(const std::string& config, const std::vector<std::string>& overrides,
                const std::string& backend) {
  const auto study = prepare_study(config, overrides, Folding::kAllowed);
  return simulate(*study, backend).timeline.iteration_time_s();
}

/// Runs the study in a child process and rethrows its error kind in the parent.
double run_forked(const std::string& config, const std::vector<std::string>& overrides,
                  const std::string& backend) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("pipe() failed");
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork() failed");
  if (pid == 0) {
    close(fds[0]);
    std::string reply;
    try {
      const double t = run_here(config, overrides, backend);
      reply = "O" + std::string(reinterpret_cast<const char*>(&t), sizeof t);
    } catch (const InfeasibleError& e) {
      reply = std::string("I") + e.what();
    } catch (const InputError& e) {
      reply = std::string("E") + e.what();
    } catch (const std::exception& e) {
      reply = std::string("X") + e.what();
    }
    size_t done = 0;
    while (done < reply.size()) {
      const ssize_t n = write(fds[1], reply.data() + done, reply.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    _exit(0);
  }
  close(fds[1]);
  std::string reply;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;)
    reply.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (reply.empty()) throw std::runtime_error("the SimGrid child process died");
  const std::string message = reply.substr(1);
  switch (reply[0]) {
    case 'O': {
      double t = 0;
      std::memcpy(&t, message.data(), sizeof t);
      return t;
    }
    case 'I':
      throw InfeasibleError(message);
    case 'E':
      throw InputError(message);
    default:
      throw std::runtime_error(message);
  }
}

}  // namespace

double iteration_time(const std::string& config, const std::vector<std::string>& overrides,
                      const std::string& backend) {
  return find_backend(backend).once_per_process ? run_forked(config, overrides, backend)
                                                : run_here(config, overrides, backend);
}

}  // namespace loom
