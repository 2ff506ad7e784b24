#pragma once
/// Reading and writing node-availability trace files.
///
/// Two file formats, told apart by content (or chosen with TraceOptions::format):
///
///   events  `time_ms,add|remove,node` — one event per line, sorted by time, no header.
///           The EC2 p3 / g4dn logs of Bamboo and Oobleck's controlled-failure traces
///           (5m.csv ... 6h.csv) are in this format, and write_availability_csv writes it.
///           Blank lines and lines starting with '#' are skipped, except that a comment
///           `# duration_s=<seconds>` sets the trace's end (default: the last event).
///           time_ms may have a fractional part; CRLF line ends are accepted.
///   counts  `YYYY-MM-DD, HH:MM:SS, N` — N instances alive at that (UTC) time: the GCP
///           a100x1 / v100x1 series. Time 0 is the first sample; the first sample's N
///           nodes are the initial ones; a rise adds fresh nodes `gcp-<k>` (k counts up
///           from N+1), a fall removes the most recently added alive nodes first (a count
///           does not say which instance went, so one fixed, documented rule).
///
/// Events at time 0 that add a node become AvailabilityTrace::initial (the cluster the job
/// starts on); every later line is one AvailabilityEvent. Malformed input throws
/// InputError naming `file:line` and what is wrong.
#include <iosfwd>
#include <string>

#include "traces/availability.hpp"

namespace loom {

enum class TraceFormat : std::uint8_t { kAuto, kEvents, kCounts };

/// What to do with a count-series sample whose timestamp is earlier than an earlier
/// sample's (the GCP v100 file has 15 such lines).
enum class OutOfOrder : std::uint8_t {
  kError,  ///< InputError naming the line (the default: never guess silently)
  kDrop,   ///< skip the sample; the count is in AvailabilityTrace::dropped_out_of_order
};

struct TraceOptions {
  TraceFormat format = TraceFormat::kAuto;
  OutOfOrder out_of_order = OutOfOrder::kError;
  /// Preemption-notice lead time given to every removal (seconds; e.g. 120 for EC2's
  /// two-minute warning, 30 for GCP). Clamped to the removal's own time.
  double notice_s = 0;
  /// Multiplies every time (0.5 replays the trace twice as fast). Must be > 0.
  double time_scale = 1;
  /// Replay only the window [start_s, start_s + max_duration_s] of the (scaled) trace:
  /// nodes alive at start_s (events at start_s applied) become the initial ones, times
  /// shift by -start_s, and events at the window's end are kept.
  double start_s = 0;
  double max_duration_s = 0;  ///< 0 = to the end of the trace
};

/// "events" / "counts" / "auto" for messages and the CLI; parse_trace_format throws
/// InputError naming `what` for any other word.
const char* to_string(TraceFormat format);
TraceFormat parse_trace_format(const std::string& word, const std::string& what);

/// Loads a trace file; `source` of the result is `path`.
AvailabilityTrace load_availability_trace(const std::string& path, const TraceOptions& options);

/// The same from a stream; `name` stands for the file in messages and in `source`.
AvailabilityTrace read_availability_trace(std::istream& in, const std::string& name,
                                          const TraceOptions& options);

/// Writes `trace` in the events format (initial nodes as adds at time 0, whole
/// milliseconds when a time is one, a `# duration_s=` comment), so that loading the file
/// with default options gives the same trace back (notice_s is not stored: it is a
/// loading option). Throws on a failed write.
void write_availability_csv(const AvailabilityTrace& trace, const std::string& path);
void write_availability_csv(const AvailabilityTrace& trace, std::ostream& out);

}  // namespace loom
