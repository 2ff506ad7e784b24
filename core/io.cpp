#include "core/io.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "core/errors.hpp"

namespace loom {

void check_readable_file(const std::string& path, const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (path.empty()) throw InputError("no " + what + " given (an empty path)");
  if (!fs::exists(status)) throw InputError(path + ": cannot open the " + what + ": no such file");
  if (fs::is_directory(status))
    throw InputError(path + ": is a directory, expected the " + what + " (a file)");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open the " + what + ": " + std::strerror(errno));
}

std::ifstream open_for_read(const std::string& path, const std::string& what) {
  check_readable_file(path, what);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open the " + what);
  return in;
}

std::ofstream open_for_write(const std::string& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw InputError(path + ": cannot open for writing");
  return out;
}

void finish_write(std::ofstream& out, const std::string& path) {
  out.close();
  if (!out) throw std::runtime_error(path + ": write failed (disk full?)");
}

}  // namespace loom
