#include "core/units.hpp"

#include <array>
#include <charconv>
#include <cmath>
#include <string>
#include <utility>

namespace loom {
namespace {

using Suffixes = std::initializer_list<std::pair<std::string_view, double>>;

// Splits "12.5ms" into 12.5 and "ms", then looks the suffix up. Suffix matching is exact
// (case-sensitive) because "Gb" and "GB" differ by a factor of eight.
std::optional<double> parse_with_suffix(std::string_view text, Suffixes suffixes) {
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  if (text.empty()) return std::nullopt;
  double value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{}) return std::nullopt;
  std::string_view suffix(end, text.data() + text.size());
  while (!suffix.empty() && suffix.front() == ' ') suffix.remove_prefix(1);
  for (const auto& [name, scale] : suffixes) {
    // from_chars accepts "nan" and "inf": no quantity is either.
    if (suffix == name)
      return std::isfinite(value * scale) ? std::optional(value * scale) : std::nullopt;
  }
  return std::nullopt;
}

}  // namespace

std::optional<double> parse_number(std::string_view text) {
  double value = 0;
  const auto r = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || r.ec != std::errc() || r.ptr != text.data() + text.size() ||
      !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

std::optional<double> parse_seconds(std::string_view text) {
  return parse_with_suffix(text, {{"", 1.0},
                                  {"s", 1.0},
                                  {"ms", 1e-3},
                                  {"us", 1e-6},
                                  {"ns", 1e-9},
                                  {"min", 60.0},
                                  {"h", 3600.0}});
}

std::optional<double> parse_bandwidth(std::string_view text) {
  return parse_with_suffix(text, {{"", 1.0},
                                  {"Bps", 1.0},
                                  {"KBps", 1e3},
                                  {"MBps", 1e6},
                                  {"GBps", 1e9},
                                  {"TBps", 1e12},
                                  {"bps", 1.0 / 8},
                                  {"Kbps", 1e3 / 8},
                                  {"Mbps", 1e6 / 8},
                                  {"Gbps", 1e9 / 8},
                                  {"Tbps", 1e12 / 8}});
}

std::optional<double> parse_bytes(std::string_view text) {
  return parse_with_suffix(text, {{"", 1.0},
                                  {"B", 1.0},
                                  {"KB", 1e3},
                                  {"MB", 1e6},
                                  {"GB", 1e9},
                                  {"TB", 1e12},
                                  {"KiB", 1024.0},
                                  {"MiB", 1024.0 * 1024},
                                  {"GiB", 1024.0 * 1024 * 1024},
                                  {"TiB", 1024.0 * 1024 * 1024 * 1024}});
}

std::optional<double> parse_flops(std::string_view text) {
  return parse_with_suffix(
      text, {{"", 1.0}, {"FLOPS", 1.0}, {"GFLOPS", 1e9}, {"TFLOPS", 1e12}, {"PFLOPS", 1e15}});
}

}  // namespace loom
