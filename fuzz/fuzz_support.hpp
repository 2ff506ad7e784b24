#pragma once
/// Shared by the libFuzzer targets (one per input parser, fuzz_<parser>.cpp): Loom's own
/// input errors are the expected answer to bad bytes, so they are caught here; anything
/// else (a crash, an ASan or UBSan report, another exception, a leak, a timeout) escapes
/// to libFuzzer and is a finding. See bench/fuzz.sh.
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "core/errors.hpp"
#include "core/resources.hpp"

namespace loom::fuzz {

/// The fuzzer's bytes as text.
inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

/// Runs `parse`, swallowing the errors Loom reports to users (exit 2 / 3). The resource
/// guards (core/resources.hpp) refuse past 1 GiB, well under bench/fuzz.sh's
/// -rss_limit_mb=2048, so an input that asks for a huge plan is an expected refusal and
/// one that allocates past the guard is a finding.
template <class Parse>
int run(Parse&& parse) {
  static const bool limited = (set_memory_limit(1024.0 * 1024 * 1024), true);
  (void)limited;
  try {
    parse();
  } catch (const InputError&) {
  } catch (const InfeasibleError&) {
  }
  return 0;
}

/// A per-process scratch folder for parsers that read a path (removed at exit).
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    const std::filesystem::path shm = "/dev/shm";
    const std::filesystem::path base =
        std::filesystem::is_directory(shm) && access(shm.c_str(), W_OK) == 0
            ? shm
            : std::filesystem::temp_directory_path();
    auto d = base / ("loom-fuzz-" + std::to_string(getpid()));
    std::filesystem::create_directories(d);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch_dir(), ec);
    });
    return d;
  }();
  return dir;
}

/// Writes the bytes to `scratch_dir()/name` and returns its path.
inline std::string write_input(const std::uint8_t* data, std::size_t size,
                               const std::string& name) {
  const std::string path = (scratch_dir() / name).string();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return path;
}

/// A path under the source tree (the targets' fixed configs).
inline std::string source_path(const std::string& relative) {
  return std::string(LOOM_SOURCE_DIR) + "/" + relative;
}

}  // namespace loom::fuzz
