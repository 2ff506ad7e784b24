#include "app/run_progress.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

namespace loom {

RunProgress::RunProgress(std::string label, double interval_s)
    : label_(std::move(label)), interval_s_(interval_s) {}

std::optional<std::string> RunProgress::update(double done, double elapsed_s) {
  if (done <= 0) {
    if (start_s_ == 0) start_s_ = elapsed_s;
    return std::nullopt;
  }
  if (elapsed_s - last_s_ < interval_s_) return std::nullopt;
  last_s_ = elapsed_s;
  const double working_s = elapsed_s - start_s_;
  const std::string setup =
      start_s_ >= 1 ? " (" + duration_text(start_s_) + " of it setting up)" : "";
  char line[200];
  std::snprintf(line, sizeof line, "%s %.1f%% of operations done after %s%s, about %s left",
                label_.c_str(), done * 100, duration_text(elapsed_s).c_str(), setup.c_str(),
                duration_text(working_s * (1 - done) / done).c_str());
  return std::string(line);
}

std::string duration_text(double seconds) {
  const long s = std::lround(std::max(seconds, 0.0));
  char text[48];
  if (s < 60)
    std::snprintf(text, sizeof text, "%ld s", s);
  else if (s < 3600)
    std::snprintf(text, sizeof text, "%ld min %ld s", s / 60, s % 60);
  else
    std::snprintf(text, sizeof text, "%ld h %02ld min", s / 3600, s / 60 % 60);
  return text;
}

}  // namespace loom
