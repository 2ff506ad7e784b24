#pragma once
/// Reading input files with clear errors, and writing output files. Callers write into a staging
/// directory that the CLI publishes atomically (cli/output_dir.hpp); these make a failed write
/// (full disk, quota) an error instead of a truncated file that gets published.
#include <fstream>
#include <string>

namespace loom {

/// Throws InputError unless `path` is a readable regular file, saying what it is instead:
/// "PATH: cannot open the WHAT: no such file" / ": is a directory, expected the WHAT".
void check_readable_file(const std::string& path, const std::string& what);

/// check_readable_file, then opens it (binary).
std::ifstream open_for_read(const std::string& path, const std::string& what);

/// Opens `path` for writing (binary, truncating); throws InputError naming it on failure.
std::ofstream open_for_write(const std::string& path);

/// Flushes and closes `out`; throws std::runtime_error naming `path` if any write failed.
void finish_write(std::ofstream& out, const std::string& path);

}  // namespace loom
