#pragma once
/// Option checks CLI11 lacks: its Range and PositiveNumber let NaN through (every
/// comparison with NaN is false) and print the bounds of a double with all 309 digits.
#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <string>

namespace loom {

/// A finite number in [min, max], both bounds printed as written ("0.001", "86400").
inline CLI::Validator finite_range(double min, double max, const std::string& unit = "") {
  const auto text = [](double v) {
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    return std::string(buf, r.ptr);
  };
  const std::string range = "a finite number from " + text(min) + " to " + text(max) + unit;
  return CLI::Validator(
      [=](std::string& input) -> std::string {
        double v = 0;
        const char* end = input.data() + input.size();
        const auto r = std::from_chars(input.data(), end, v);
        if (r.ec != std::errc() || r.ptr != end || !std::isfinite(v) || v < min || v > max)
          return "must be " + range + ", got '" + input + "'";
        return "";
      },
      "FINITE in [" + text(min) + ", " + text(max) + "]");
}

}  // namespace loom
