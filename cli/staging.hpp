#pragma once
/// Staging paths of commands that write: `.NAME.tmp-PID` beside the destination, renamed
/// into place when everything succeeded. SIGINT / SIGTERM remove every registered staging
/// path and exit 130 / 143, so an interrupted run leaves neither half-written output nor
/// its staging behind (a handler: destructors do not run when a signal ends a process).
#include <signal.h>

#include <filesystem>
#include <string>

namespace loom {

/// Installs the SIGINT / SIGTERM handler (once; not where they are ignored, as under
/// nohup): it removes the registered staging paths, says so and exits 128 + the signal.
void install_interrupt_handler();

/// Installs the handler and registers `path` for removal by it.
void register_staging(const std::filesystem::path& path);
/// The path was renamed into place or removed: the handler leaves it alone.
void unregister_staging(const std::filesystem::path& path);

/// Holds SIGINT / SIGTERM back for its lifetime (they arrive when it ends): for the
/// renames that swap a result into place, which must not stop half-way.
class BlockInterrupts {
 public:
  BlockInterrupts();
  ~BlockInterrupts();
  BlockInterrupts(const BlockInterrupts&) = delete;
  BlockInterrupts& operator=(const BlockInterrupts&) = delete;

 private:
  sigset_t old_;
};

/// `.NAME.tmp-PID` in the destination's folder.
std::filesystem::path staging_path(const std::filesystem::path& destination);

/// One output file written through a staging file: `--out FILE`, or `--out DIR` (an
/// existing folder, or a path ending in '/') for DIR/`default_name`. The folder is created
/// with its parents. An existing file is replaced.
class StagedFile {
 public:
  StagedFile(const std::string& out, const std::string& default_name);
  ~StagedFile();  ///< removes the staging file if commit() was not reached
  StagedFile(const StagedFile&) = delete;
  StagedFile& operator=(const StagedFile&) = delete;

  std::string path() const { return staging_.string(); }  ///< where to write
  const std::filesystem::path& destination() const { return destination_; }
  void commit();  ///< renames the staging file onto the destination

 private:
  std::filesystem::path destination_;
  std::filesystem::path staging_;
  bool committed_ = false;
};

}  // namespace loom
