#pragma once
/// Sweep progress on stderr: a bar with rate and ETA redrawn in place on a terminal, one
/// plain line per finished point otherwise (logs, Slurm output files).
#include <chrono>
#include <cstdio>
#include <string>

namespace loom::sweep {

class Progress {
 public:
  /// `total` points to run; `quiet` prints nothing.
  Progress(size_t total, bool quiet);
  /// One point finished with `status`; `label` names it in plain mode.
  void done(const std::string& status, const std::string& label);
  /// Ends the bar's line on a terminal.
  void finish();

 private:
  size_t total_;
  size_t done_ = 0;
  size_t not_ok_ = 0;
  bool quiet_;
  bool tty_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace loom::sweep
