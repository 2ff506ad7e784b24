#include "cli/output_dir.hpp"

#include <unistd.h>

#include <stdexcept>

#include "cli/staging.hpp"
#include "core/errors.hpp"

namespace fs = std::filesystem;

namespace loom {

OutputDir::OutputDir(const std::string& destination, bool force)
    : destination_(fs::absolute(destination).lexically_normal()) {
  if (destination_.filename().empty()) destination_ = destination_.parent_path();
  if (fs::exists(destination_)) {
    if (!fs::is_directory(destination_))
      throw InputError("--out " + destination + ": exists and is not a folder");
    const bool loom_output =
        fs::exists(destination_ / "metrics.json") ||
        fs::exists(destination_ / "summary.json") ||    // summary.json: a `loom replay` output
        fs::exists(destination_ / "schedulers.csv") ||  // `loom sim --schedulers`
        fs::exists(destination_ / "loom.0.et");         // `loom schedule export --format chakra`
    if (!fs::is_empty(destination_) && !loom_output) {
      throw InputError("--out " + destination +
                       ": exists and is not a Loom output folder (no metrics.json); refusing to "
                       "replace it (choose another --out)");
    }
    if (!fs::is_empty(destination_) && !force) {
      throw InputError("--out " + destination +
                       ": holds the output of an earlier run; pass --force to replace it, or "
                       "choose another --out");
    }
  }
  std::error_code ec;
  fs::create_directories(destination_.parent_path(), ec);
  if (ec || !fs::is_directory(destination_.parent_path())) {
    throw InputError("--out " + destination + ": cannot create the folder " +
                     destination_.parent_path().string() +
                     (ec ? ": " + ec.message() : std::string(": a file is in the way")));
  }
  staging_ = staging_path(destination_);
  fs::remove_all(staging_, ec);
  register_staging(staging_);
  if (!fs::create_directory(staging_, ec)) {
    unregister_staging(staging_);
    throw InputError("--out " + destination + ": cannot create " + staging_.string() + ": " +
                     ec.message());
  }
}

OutputDir::~OutputDir() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(staging_, ec);
  unregister_staging(staging_);
}

void OutputDir::commit() {
  std::error_code ec;
  const fs::path old = destination_.parent_path() / ("." + destination_.filename().string() +
                                                     ".old-" + std::to_string(::getpid()));
  {
    // Both renames or neither: an interrupt waits until the new results are in place,
    // then removes what is left of the old ones.
    const BlockInterrupts block;
    const bool replacing = fs::exists(destination_);
    if (replacing) fs::rename(destination_, old);
    fs::rename(staging_, destination_, ec);
    if (ec) {
      // Put the previous results back rather than leaving them under a hidden name.
      std::error_code restore;
      if (replacing) fs::rename(old, destination_, restore);
      throw std::runtime_error("--out " + destination_.string() +
                               ": cannot publish the results: " + ec.message());
    }
    unregister_staging(staging_);
    committed_ = true;
    if (replacing) register_staging(old);
  }
  fs::remove_all(old, ec);
  unregister_staging(old);
}

}  // namespace loom
