#pragma once
/// Writes a run's files into a staging directory beside the destination and publishes
/// them only when everything succeeded, so a failed or interrupted run (SIGINT, SIGTERM:
/// cli/staging.hpp) never leaves half-written output or the staging directory.
#include <filesystem>
#include <string>

namespace loom {

class OutputDir {
 public:
  /// Creates the destination's parent folders. Refuses (InputError) a destination that is
  /// a non-empty folder unless `force`; even with `force`, one that does not look like a
  /// Loom output folder (no metrics.json, summary.json, schedulers.csv or loom.0.et), so
  /// `--out . --force` cannot wipe a source tree.
  OutputDir(const std::string& destination, bool force);
  ~OutputDir();  ///< removes the staging directory if commit() was not reached
  OutputDir(const OutputDir&) = delete;
  OutputDir& operator=(const OutputDir&) = delete;

  std::string file(const std::string& name) const { return (staging_ / name).string(); }
  /// Replaces the destination with the staging directory.
  void commit();
  const std::filesystem::path& destination() const { return destination_; }

 private:
  std::filesystem::path destination_;
  std::filesystem::path staging_;
  bool committed_ = false;
};

}  // namespace loom
