#include "app/sweep/progress.hpp"

#include <unistd.h>

#include <algorithm>

namespace loom::sweep {
namespace {

std::string clock_text(double s) {
  const long t = static_cast<long>(s + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  return buf;
}

}  // namespace

Progress::Progress(size_t total, bool quiet)
    : total_(total),
      quiet_(quiet),
      tty_(isatty(STDERR_FILENO)),
      start_(std::chrono::steady_clock::now()) {}

void Progress::done(const std::string& status, const std::string& label) {
  ++done_;
  if (status != "ok") ++not_ok_;
  if (quiet_) return;
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double rate = elapsed > 0 ? static_cast<double>(done_) / elapsed : 0;
  const double eta = rate > 0 ? static_cast<double>(total_ - done_) / rate : 0;
  if (!tty_) {
    std::fprintf(stderr, "loom: sweep [%zu/%zu] %s %s\n", done_, total_, status.c_str(),
                 label.c_str());
    return;
  }
  // Redraw at most 10 times a second: a fast evaluator sweep finishes hundreds per second.
  if (done_ < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  constexpr size_t kWidth = 30;
  std::string bar(kWidth * done_ / std::max<size_t>(total_, 1), '#');
  bar.resize(kWidth, '.');
  std::fprintf(stderr, "\r[%s] %zu/%zu points, %zu not ok, %.1f points/s, ETA %s ", bar.c_str(),
               done_, total_, not_ok_, rate, clock_text(eta).c_str());
  std::fflush(stderr);
}

void Progress::finish() {
  if (!quiet_ && tty_ && done_ > 0) std::fprintf(stderr, "\n");
}

}  // namespace loom::sweep
