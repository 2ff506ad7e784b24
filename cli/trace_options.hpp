#pragma once
/// The trace loader's options (traces/trace_io.hpp TraceOptions) as command-line flags,
/// shared by `loom trace info` and `loom replay` so both read a trace the same way.
#include <CLI/CLI.hpp>
#include <string>

#include "traces/trace_io.hpp"

namespace loom {

struct TraceCliOptions {
  std::string format = "auto";
  std::string out_of_order = "error";
  std::string notice;  ///< empty: the caller's default (replay: the config's replay.notice)
  double time_scale = 1;
  std::string start = "0";
};

/// Adds --format, --out-of-order, --notice, --time-scale and --start to `sub`.
void add_trace_options(CLI::App& sub, TraceCliOptions& o, const std::string& notice_default);

/// Parses the flags; `default_notice_s` applies when --notice was not given. Throws
/// InputError naming the flag on a bad word or duration.
TraceOptions trace_options_from_cli(const TraceCliOptions& o, double default_notice_s);

}  // namespace loom
