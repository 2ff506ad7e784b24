#include "traces/trace_io.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>

#include "core/errors.hpp"
#include "core/io.hpp"
#include "traces/trace_parse.hpp"

namespace loom {

namespace trace_detail {

std::vector<TextLine> read_lines(std::istream& in) {
  std::vector<TextLine> lines;
  int number = 0;
  for (std::string text; std::getline(in, text);) {
    if (!text.empty() && text.back() == '\r') text.pop_back();
    lines.push_back({++number, std::move(text)});
  }
  return lines;
}

std::string_view trim(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split_fields(std::string_view line) {
  std::vector<std::string_view> fields;
  for (size_t start = 0;;) {
    const size_t comma = line.find(',', start);
    fields.push_back(trim(line.substr(start, comma - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return fields;
}

std::string at(const std::string& name, int line) {
  return name + ":" + std::to_string(line) + ": ";
}

const TextLine* first_data_line(const std::vector<TextLine>& lines) {
  for (const TextLine& line : lines) {
    const std::string_view t = trim(line.text);
    if (!t.empty() && t.front() != '#') return &line;
  }
  return nullptr;
}

}  // namespace trace_detail

namespace {

using namespace trace_detail;

/// The format of the first data line: an add/remove word in the second field means
/// events, a YYYY-MM-DD first field means counts.
TraceFormat detect_format(const std::vector<TextLine>& lines, const std::string& name) {
  const TextLine* line = first_data_line(lines);
  if (line == nullptr) {
    throw InputError(at(name, lines.empty() ? 1 : lines.back().number) +
                     "empty trace: no data lines");
  }
  const std::vector<std::string_view> f = split_fields(line->text);
  if (f.size() >= 2 && (f[1] == "add" || f[1] == "remove")) return TraceFormat::kEvents;
  if (!f.empty() && f[0].size() == 10 && f[0][4] == '-' && f[0][7] == '-') {
    return TraceFormat::kCounts;
  }
  throw InputError(at(name, line->number) + "cannot tell the trace format from '" + line->text +
                   "': expected 'time_ms,add|remove,node' (events) or "
                   "'YYYY-MM-DD, HH:MM:SS, N' (counts)");
}

/// Keeps (start_s, start_s + max_duration_s] with times shifted to start at 0; what
/// happened up to start_s is folded into the initial nodes.
void apply_window(AvailabilityTrace& trace, double start_s, double max_duration_s) {
  const double end =
      max_duration_s > 0 ? std::min(trace.duration_s, start_s + max_duration_s) : trace.duration_s;
  if (start_s > 0) {
    trace.initial = alive_at(trace, start_s);
    std::erase_if(trace.events, [&](const AvailabilityEvent& e) { return e.time_s <= start_s; });
  }
  std::erase_if(trace.events, [&](const AvailabilityEvent& e) { return e.time_s > end; });
  for (AvailabilityEvent& e : trace.events) e.time_s -= start_s;
  trace.duration_s = end - start_s;
}

void apply_options(AvailabilityTrace& trace, const TraceOptions& o) {
  const std::string& name = trace.source;
  if (!(o.time_scale > 0) || !std::isfinite(o.time_scale)) {
    throw InputError(name + ": time scale must be a positive number");
  }
  if (!(o.notice_s >= 0) || !(o.start_s >= 0) || !(o.max_duration_s >= 0) ||
      !std::isfinite(o.notice_s + o.start_s + o.max_duration_s)) {
    throw InputError(name + ": notice, start and max duration must be non-negative seconds");
  }
  if (o.time_scale != 1) {
    for (AvailabilityEvent& e : trace.events) e.time_s *= o.time_scale;
    trace.duration_s *= o.time_scale;
  }
  if (o.start_s > 0 && o.start_s >= trace.duration_s) {
    throw InputError(name + ": start " + std::to_string(o.start_s) +
                     " s is not before the end of the trace (" + std::to_string(trace.duration_s) +
                     " s)");
  }
  if (o.start_s > 0 || o.max_duration_s > 0) apply_window(trace, o.start_s, o.max_duration_s);
  for (AvailabilityEvent& e : trace.events) {
    if (e.change == AvailabilityChange::kRemove) e.notice_s = std::min(o.notice_s, e.time_s);
  }
}

/// `time_s` as milliseconds that read back (ms / 1000.0) as exactly time_s.
std::string exact_ms(double time_s) {
  double ms = time_s * 1000.0;
  for (int i = 0; i < 4 && ms / 1000.0 != time_s; ++i) {
    ms = std::nextafter(ms, ms / 1000.0 < time_s ? INFINITY : -INFINITY);
  }
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, ms);
  return std::string(buf, r.ptr);
}

/// `text` with line breaks turned into spaces, so it fits in one comment line.
std::string one_line(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  std::replace(text.begin(), text.end(), '\r', ' ');
  return text;
}

}  // namespace

const char* to_string(TraceFormat format) {
  switch (format) {
    case TraceFormat::kAuto:
      return "auto";
    case TraceFormat::kEvents:
      return "events";
    case TraceFormat::kCounts:
      return "counts";
  }
  return "?";
}

TraceFormat parse_trace_format(const std::string& word, const std::string& what) {
  for (TraceFormat f : {TraceFormat::kAuto, TraceFormat::kEvents, TraceFormat::kCounts}) {
    if (word == to_string(f)) return f;
  }
  throw InputError(what + ": unknown trace format '" + word + "' (auto, events, counts)");
}

AvailabilityTrace read_availability_trace(std::istream& in, const std::string& name,
                                          const TraceOptions& options) {
  const std::vector<TextLine> lines = read_lines(in);
  const TraceFormat format =
      options.format == TraceFormat::kAuto ? detect_format(lines, name) : options.format;
  AvailabilityTrace trace = format == TraceFormat::kEvents
                                ? parse_events(lines, name)
                                : parse_counts(lines, name, options.out_of_order);
  apply_options(trace, options);
  check_availability_trace(trace);  // the parsers' own invariants, checked once more
  return trace;
}

AvailabilityTrace load_availability_trace(const std::string& path, const TraceOptions& options) {
  std::ifstream in = open_for_read(path, "trace file");
  return read_availability_trace(in, path, options);
}

void write_availability_csv(const AvailabilityTrace& trace, std::ostream& out) {
  check_availability_trace(trace);
  const auto checked = [&](const std::string& node) -> const std::string& {
    if (node.find_first_of(",\n\r# \t") != std::string::npos) {
      throw InputError(trace.source + ": node name '" + node +
                       "' cannot be written (commas, '#' and white space are not allowed)");
    }
    return node;
  };
  char duration[64];
  const auto r = std::to_chars(duration, duration + sizeof duration, trace.duration_s);
  out << "# loom availability trace: time_ms,add|remove,node\n"
      << "# source: " << one_line(trace.source) << "\n"
      << "# duration_s=" << std::string_view(duration, r.ptr - duration) << "\n";
  for (const std::string& node : trace.initial) out << "0,add," << checked(node) << "\n";
  for (const AvailabilityEvent& e : trace.events) {
    out << exact_ms(e.time_s) << (e.change == AvailabilityChange::kAdd ? ",add," : ",remove,")
        << checked(e.node) << "\n";
  }
}

void write_availability_csv(const AvailabilityTrace& trace, const std::string& path) {
  std::ostringstream text;  // validate and format everything before touching the file
  write_availability_csv(trace, text);
  std::ofstream out = open_for_write(path);
  out << text.str();
  finish_write(out, path);
}

}  // namespace loom
