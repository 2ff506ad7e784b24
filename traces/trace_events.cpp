// The events format: `time_ms,add|remove,node` (Bamboo's EC2 logs, Oobleck's
// controlled-failure traces, and what write_availability_csv writes).
#include <charconv>
#include <cmath>
#include <unordered_map>

#include "core/errors.hpp"
#include "traces/trace_parse.hpp"

namespace loom::trace_detail {

namespace {

std::string format_ms(double ms) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, ms);
  return std::string(buf, r.ptr);
}

/// `# duration_s=<seconds>` sets the end of the trace; other comments are ignored.
void read_comment(const TextLine& line, const std::string& name, double* duration_s) {
  std::string_view body = trim(std::string_view(line.text).substr(1));
  constexpr std::string_view kKey = "duration_s";
  if (body.substr(0, kKey.size()) != kKey) return;
  body = trim(body.substr(kKey.size()));
  if (body.empty() || body.front() != '=') return;
  const auto value = parse_number(trim(body.substr(1)));
  if (!value || *value < 0) {
    throw InputError(at(name, line.number) +
                     "'# duration_s=' must be followed by a non-negative number of seconds, got '" +
                     line.text + "'");
  }
  *duration_s = *value;
}

struct EventLine {
  double time_ms = 0;
  AvailabilityChange change = AvailabilityChange::kAdd;
  std::string node;
};

EventLine parse_event_line(const TextLine& line, const std::string& name) {
  const std::vector<std::string_view> f = split_fields(line.text);
  if (f.size() != 3) {
    throw InputError(at(name, line.number) + "expected 3 fields time_ms,add|remove,node, got " +
                     std::to_string(f.size()) + " in '" + line.text + "'");
  }
  EventLine e;
  const auto time = parse_number(f[0]);
  if (!time || *time < 0) {
    throw InputError(at(name, line.number) + "bad time_ms '" + std::string(f[0]) +
                     "': expected a non-negative number of milliseconds");
  }
  e.time_ms = *time;
  if (f[1] == "add") {
    e.change = AvailabilityChange::kAdd;
  } else if (f[1] == "remove") {
    e.change = AvailabilityChange::kRemove;
  } else {
    throw InputError(at(name, line.number) + "bad event '" + std::string(f[1]) +
                     "': expected 'add' or 'remove'");
  }
  if (f[2].empty()) throw InputError(at(name, line.number) + "empty node name");
  e.node = std::string(f[2]);
  return e;
}

}  // namespace

AvailabilityTrace parse_events(const std::vector<TextLine>& lines, const std::string& name) {
  AvailabilityTrace trace;
  trace.source = name;
  trace.format = "events";
  std::unordered_map<std::string, int> alive;  // node -> line that added it
  double previous_ms = 0;
  double duration_s = -1;
  for (const TextLine& line : lines) {
    const std::string_view text = trim(line.text);
    if (text.empty()) continue;
    if (text.front() == '#') {
      read_comment(line, name, &duration_s);
      continue;
    }
    EventLine e = parse_event_line(line, name);
    if (e.time_ms < previous_ms) {
      throw InputError(at(name, line.number) + "time " + format_ms(e.time_ms) +
                       " ms is before the previous event's " + format_ms(previous_ms) +
                       " ms (events must be sorted by time)");
    }
    previous_ms = e.time_ms;
    if (e.change == AvailabilityChange::kAdd) {
      const auto [it, fresh] = alive.emplace(e.node, line.number);
      if (!fresh) {
        throw InputError(at(name, line.number) + "adds node '" + e.node +
                         "', which is already alive (added on line " + std::to_string(it->second) +
                         ")");
      }
    } else if (alive.erase(e.node) == 0) {
      throw InputError(at(name, line.number) + "removes node '" + e.node +
                       "', which is not alive at that time");
    }
    const double time_s = e.time_ms / 1000.0;
    if (time_s == 0 && e.change == AvailabilityChange::kAdd && trace.events.empty()) {
      trace.initial.push_back(std::move(e.node));  // the cluster the job starts on
    } else {
      trace.events.push_back({time_s, e.change, std::move(e.node), 0.0});
    }
  }
  if (trace.initial.empty() && trace.events.empty()) {
    throw InputError(at(name, lines.empty() ? 1 : lines.back().number) +
                     "empty trace: no time_ms,add|remove,node lines");
  }
  const double last_s = trace.events.empty() ? 0.0 : trace.events.back().time_s;
  if (duration_s >= 0 && duration_s < last_s) {
    throw InputError(name + ": '# duration_s=' ends the trace before its last event at " +
                     std::to_string(last_s) + " s");
  }
  trace.duration_s = duration_s >= 0 ? duration_s : last_s;
  return trace;
}

}  // namespace loom::trace_detail
