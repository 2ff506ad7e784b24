#pragma once
// Internal to loom_traces: the line reader and the two format parsers behind
// load_availability_trace (traces/trace_io.hpp). Not part of the library's interface.
#include <istream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/units.hpp"
#include "traces/availability.hpp"
#include "traces/trace_io.hpp"

namespace loom::trace_detail {

struct TextLine {
  int number = 0;    // 1-based line number in the file
  std::string text;  // without the line end (LF or CRLF)
};

std::vector<TextLine> read_lines(std::istream& in);
std::string_view trim(std::string_view s);
std::vector<std::string_view> split_fields(std::string_view line);
/// "name:line: " — the prefix of every message about one line.
std::string at(const std::string& name, int line);

/// The first line that is neither blank nor a comment, or nullptr.
const TextLine* first_data_line(const std::vector<TextLine>& lines);

/// `time_ms,add|remove,node` lines; adds at time 0 become the initial nodes.
AvailabilityTrace parse_events(const std::vector<TextLine>& lines, const std::string& name);

/// `YYYY-MM-DD, HH:MM:SS, N` alive-count samples turned into add/remove events.
AvailabilityTrace parse_counts(const std::vector<TextLine>& lines, const std::string& name,
                               OutOfOrder out_of_order);

/// Seconds since 1970-01-01 of a proleptic-Gregorian UTC date and time (no time zones, no
/// leap seconds: the GCP series are plain wall-clock samples).
long long civil_to_seconds(int year, int month, int day, int hour, int minute, int second);

}  // namespace loom::trace_detail
