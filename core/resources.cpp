#include "core/resources.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "core/errors.hpp"
#include "core/units.hpp"

namespace loom {
namespace {

double g_limit = 0;  // 0: not set on the command line

double physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 8e9;
}

/// Where the limit comes from, for the message.
std::string limit_source() {
  if (g_limit > 0) return "--max-memory";
  if (std::getenv("LOOM_MAX_MEMORY")) return "$LOOM_MAX_MEMORY";
  return "half this machine's memory";
}

}  // namespace

double memory_limit_bytes() {
  if (g_limit > 0) return g_limit;
  if (const char* env = std::getenv("LOOM_MAX_MEMORY")) {
    const auto parsed = parse_bytes(env);
    if (!parsed || !(*parsed > 0))
      throw InputError(std::string("$LOOM_MAX_MEMORY: expected a size like 8GB, got '") + env +
                       "'");
    return *parsed;
  }
  return physical_memory_bytes() / 2;
}

void set_memory_limit(double bytes) {
  g_limit = bytes;
}

std::string format_gib(double bytes) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.3g GiB", bytes / (1024.0 * 1024 * 1024));
  return buf;
}

void check_memory_estimate(const std::string& what, double bytes, const std::string& knob) {
  const double limit = memory_limit_bytes();
  if (bytes <= limit) return;
  throw InfeasibleError(what + " needs about " + format_gib(bytes) + " of memory, more than the " +
                        format_gib(limit) + " limit (" + limit_source() + "); " + knob +
                        ", or raise the limit with --max-memory SIZE (e.g. --max-memory 64GB)");
}

}  // namespace loom
