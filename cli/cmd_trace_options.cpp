// Trace loader flags shared by `loom trace info` and `loom replay` (cli/trace_options.hpp).
#include "cli/checks.hpp"
#include "cli/trace_options.hpp"
#include "core/errors.hpp"
#include "core/units.hpp"

namespace loom {
namespace {

double duration_flag(const std::string& text, const char* flag) {
  const auto v = parse_seconds(text);
  if (!v || *v < 0) {
    throw InputError(std::string(flag) + ": expected a duration like 10min, 6h or 90s, got '" +
                     text + "'");
  }
  return *v;
}

}  // namespace

void add_trace_options(CLI::App& sub, TraceCliOptions& o, const std::string& notice_default) {
  sub.add_option("--format", o.format,
                 "Trace format: auto (default: detected from content), events, counts");
  sub.add_option("--out-of-order", o.out_of_order,
                 "Count samples that go back in time (the GCP v100 trace has them): error "
                 "(default) or drop");
  sub.add_option(
      "--notice", o.notice,
      "Preemption notice before each removal, e.g. 120s (default: " + notice_default + ")");
  sub.add_option("--time-scale", o.time_scale,
                 "Multiply every trace time by this factor (default 1)")
      ->check(finite_range(1e-6, 1e6));
  sub.add_option("--start", o.start, "Start the trace at this time (e.g. 2h; default 0)");
}

TraceOptions trace_options_from_cli(const TraceCliOptions& o, double default_notice_s) {
  TraceOptions opts;
  opts.format = parse_trace_format(o.format, "--format");
  if (o.out_of_order != "error" && o.out_of_order != "drop") {
    throw InputError("--out-of-order: expected error or drop, got '" + o.out_of_order + "'");
  }
  opts.out_of_order = o.out_of_order == "drop" ? OutOfOrder::kDrop : OutOfOrder::kError;
  opts.notice_s = o.notice.empty() ? default_notice_s : duration_flag(o.notice, "--notice");
  opts.time_scale = o.time_scale;
  opts.start_s = duration_flag(o.start, "--start");
  return opts;
}

}  // namespace loom
