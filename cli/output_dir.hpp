#pragma once
/// Writes a run's files into a staging directory beside the destination and publishes
/// them only when everything succeeded, so a failed run never leaves half-written output.
#include <filesystem>
#include <string>

namespace loom {

class OutputDir {
 public:
  /// Refuses (InputError) a destination that exists and does not look like a Loom output
  /// directory (no metrics.json, or summary.json for a replay), so `--out .` cannot wipe a source
  /// tree.
  explicit OutputDir(const std::string& destination);
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
