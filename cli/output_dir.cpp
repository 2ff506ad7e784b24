#include "cli/output_dir.hpp"

#include <unistd.h>

#include <stdexcept>

#include "core/errors.hpp"

namespace fs = std::filesystem;

namespace loom {

OutputDir::OutputDir(const std::string& destination)
    : destination_(fs::absolute(destination).lexically_normal()) {
  if (destination_.filename().empty()) destination_ = destination_.parent_path();
  if (fs::exists(destination_)) {
    if (!fs::is_directory(destination_))
      throw InputError("--out " + destination + ": exists and is not a directory");
    if (!fs::is_empty(destination_) && !fs::exists(destination_ / "metrics.json") &&
        !fs::exists(destination_ / "summary.json") &&    // summary.json: a `loom replay` output
        !fs::exists(destination_ / "schedulers.csv")) {  // `loom sim --schedulers`
      throw InputError("--out " + destination +
                       ": exists and is not a Loom output directory (no metrics.json); "
                       "refusing to replace it");
    }
  }
  std::error_code ec;
  fs::create_directories(destination_.parent_path(), ec);
  staging_ = destination_.parent_path() /
             ("." + destination_.filename().string() + ".tmp-" + std::to_string(::getpid()));
  fs::remove_all(staging_, ec);
  if (!fs::create_directory(staging_, ec)) {
    throw InputError("--out " + destination + ": cannot create " + staging_.string() + ": " +
                     ec.message());
  }
}

OutputDir::~OutputDir() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(staging_, ec);
}

void OutputDir::commit() {
  std::error_code ec;
  const fs::path old = destination_.parent_path() / ("." + destination_.filename().string() +
                                                     ".old-" + std::to_string(::getpid()));
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
  fs::remove_all(old, ec);
  committed_ = true;
}

}  // namespace loom
