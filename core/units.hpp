#pragma once
/// Quantities with units in human-written text ("24us", "25GBps", "48GiB", "312TFLOPS").
/// Inside Loom everything is SI base units: seconds, bytes, bytes/s, FLOP/s.
#include <optional>
#include <string_view>

namespace loom {

/// A whole field as a finite decimal number (no units, no trailing text, not nan or inf,
/// nothing out of a double's range); nullopt otherwise.
std::optional<double> parse_number(std::string_view text);
/// "0.5ms", "24us", "2s", "1e-3" (bare numbers are seconds). nullopt if malformed.
std::optional<double> parse_seconds(std::string_view text);
/// "25GBps", "200Gbps" (bits), "1.5TBps", bare numbers are bytes/s.
std::optional<double> parse_bandwidth(std::string_view text);
/// "48GiB", "80GB", "512MiB", bare numbers are bytes.
std::optional<double> parse_bytes(std::string_view text);
/// "312TFLOPS", "1.98PFLOPS", bare numbers are FLOP/s.
std::optional<double> parse_flops(std::string_view text);

}  // namespace loom
