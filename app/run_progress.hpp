#pragma once
/// Progress of one long backend run on stderr. An unfolded SimGrid run of 100k GPUs takes
/// tens of minutes, so the user sees, every `interval_s`, how far it is and an estimate of
/// what is left, instead of silence or a line every tenth. The estimate is the rate since
/// the operations started (done = 0 reported once the platform is built: building it is
/// seconds that say nothing of the rate) applied to the operations left; SimGrid's work per
/// operation is about even over an iteration.
#include <optional>
#include <string>

namespace loom {

class RunProgress {
 public:
  /// `label` names the backend in the lines ("SimGrid"); a line at most every `interval_s`.
  explicit RunProgress(std::string label, double interval_s = 10);
  /// The line to print when `done` (fraction of operations) is reached `elapsed_s` into the
  /// run, or nullopt when the last line is less than interval_s old. done = 0 marks when the
  /// operations start.
  std::optional<std::string> update(double done, double elapsed_s);

 private:
  std::string label_;
  double interval_s_;
  double last_s_ = 0;
  double start_s_ = 0;  ///< when done = 0 was reported (setup before it), else 0
};

/// "45 s", "3 min 20 s", "1 h 05 min".
std::string duration_text(double seconds);

}  // namespace loom
