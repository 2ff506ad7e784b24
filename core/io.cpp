#include "core/io.hpp"

#include <stdexcept>

#include "core/errors.hpp"

namespace loom {

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
