#pragma once
// Helpers for end-to-end tests of the `loom` binary (targets that define LOOM_BINARY).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace loom::test {

struct CliResult {
  int exit_code = -1;
  std::string output;  // what the shell redirection sent to the pipe
};

/// Runs `loom ARGS REDIRECT` through the shell: "2>&1" captures stdout and stderr
/// together, "2>/dev/null" stdout only, "2>FILE" keeps stderr apart.
inline CliResult run_loom(const std::string& args, const std::string& redirect = "2>&1") {
  const std::string command = std::string(LOOM_BINARY) + " " + args + " " + redirect;
  CliResult r;
  FILE* pipe = popen(command.c_str(), "r");
  std::array<char, 4096> buf{};
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) r.output.append(buf.data(), n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

/// `loom ARGS` exits with `code` and its output mentions every string of `mentions`.
inline void expect_exit(const std::string& args, int code,
                        const std::vector<std::string>& mentions) {
  const CliResult r = run_loom(args);
  EXPECT_EQ(r.exit_code, code) << args << "\n" << r.output;
  for (const std::string& m : mentions)
    EXPECT_NE(r.output.find(m), std::string::npos) << "missing '" << m << "' in:\n" << r.output;
}

/// A whole file as bytes ("" when it cannot be read).
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace loom::test
