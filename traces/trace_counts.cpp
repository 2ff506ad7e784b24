// The counts format: `YYYY-MM-DD, HH:MM:SS, N` samples of how many instances are alive
// (Bamboo's GCP a100x1 / v100x1 series), turned into add/remove events of synthetic nodes.
#include <charconv>
#include <cmath>
#include <vector>

#include "core/errors.hpp"
#include "core/resources.hpp"
#include "traces/trace_parse.hpp"

namespace loom::trace_detail {

namespace {

/// An integer made only of digits, of exactly `width` digits when width > 0.
std::optional<int> parse_digits(std::string_view s, size_t width) {
  if (s.empty() || (width > 0 && s.size() != width) || s.size() > 9) return std::nullopt;
  int value = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), value);
  if (r.ec != std::errc() || r.ptr != s.data() + s.size() || s.front() == '-') return std::nullopt;
  return value;
}

bool leap(int y) {
  return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

int days_in_month(int y, int m) {
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return m == 2 && leap(y) ? 29 : kDays[m - 1];
}

struct Sample {
  long long time_s = 0;  // seconds since 1970 (UTC wall clock)
  int alive = 0;
};

Sample parse_sample(const TextLine& line, const std::string& name) {
  const std::vector<std::string_view> f = split_fields(line.text);
  const std::string where = at(name, line.number);
  if (f.size() != 3) {
    throw InputError(where + "expected 3 fields 'YYYY-MM-DD, HH:MM:SS, N', got " +
                     std::to_string(f.size()) + " in '" + line.text + "'");
  }
  const std::string_view date = f[0], clock = f[1];
  const bool date_shape = date.size() == 10 && date[4] == '-' && date[7] == '-';
  const auto y = parse_digits(date.substr(0, 4), 4);
  const auto mo = date_shape ? parse_digits(date.substr(5, 2), 2) : std::nullopt;
  const auto d = date_shape ? parse_digits(date.substr(8, 2), 2) : std::nullopt;
  if (!date_shape || !y || !mo || !d || *mo < 1 || *mo > 12 || *d < 1 ||
      *d > days_in_month(*y, *mo)) {
    throw InputError(where + "bad date '" + std::string(date) + "': expected YYYY-MM-DD");
  }
  const bool clock_shape = clock.size() == 8 && clock[2] == ':' && clock[5] == ':';
  const auto h = parse_digits(clock.substr(0, 2), 2);
  const auto mi = clock_shape ? parse_digits(clock.substr(3, 2), 2) : std::nullopt;
  const auto s = clock_shape ? parse_digits(clock.substr(6, 2), 2) : std::nullopt;
  if (!clock_shape || !h || !mi || !s || *h > 23 || *mi > 59 || *s > 59) {
    throw InputError(where + "bad time '" + std::string(clock) + "': expected HH:MM:SS");
  }
  const auto n = parse_digits(f[2], 0);
  if (!n) {
    throw InputError(where + "bad count '" + std::string(f[2]) +
                     "': expected a non-negative integer number of alive instances");
  }
  // Every rise and fall becomes one event per instance: a corrupt count (fuzzing found
  // 3801221 between samples of 54) would build millions of events per line.
  constexpr long long kMaxAlive = 1'000'000;
  if (*n > kMaxAlive) {
    throw InputError(where + "count " + std::to_string(*n) + " is more than " +
                     std::to_string(kMaxAlive) + " alive instances");
  }
  return {civil_to_seconds(*y, *mo, *d, *h, *mi, *s), *n};
}

std::string clock_of(const TextLine& line) {
  const std::vector<std::string_view> f = split_fields(line.text);
  return std::string(f[0]) + " " + std::string(f[1]);
}

}  // namespace

long long civil_to_seconds(int year, int month, int day, int hour, int minute, int second) {
  // Days from 1970-01-01 by Howard Hinnant's days_from_civil (public-domain algorithm):
  // count in 400-year eras starting on March 1st so that leap days fall at an era's end.
  const long long y = year - (month <= 2 ? 1 : 0);
  const long long era = (y >= 0 ? y : y - 399) / 400;
  const long long yoe = y - era * 400;
  const long long doy = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1;
  const long long doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  const long long days = era * 146097 + doe - 719468;
  return days * 86400 + hour * 3600LL + minute * 60LL + second;
}

AvailabilityTrace parse_counts(const std::vector<TextLine>& lines, const std::string& name,
                               OutOfOrder out_of_order) {
  AvailabilityTrace trace;
  trace.source = name;
  trace.format = "counts";
  std::vector<std::string> alive;        // in order of arrival: a fall removes from the back
  double changes = 0;                    // instances added or removed so far
  constexpr double kBytesPerEvent = 96;  // the event and its node name
  int next_id = 1;
  bool first = true;
  long long t0 = 0, latest = 0;
  const TextLine* latest_line = nullptr;
  for (const TextLine& line : lines) {
    const std::string_view text = trim(line.text);
    if (text.empty() || text.front() == '#') continue;
    const Sample s = parse_sample(line, name);
    if (!first && s.time_s < latest) {
      if (out_of_order == OutOfOrder::kDrop) {
        ++trace.dropped_out_of_order;
        continue;
      }
      throw InputError(at(name, line.number) + "time " + clock_of(line) +
                       " is before the previous sample's " + clock_of(*latest_line) + " (line " +
                       std::to_string(latest_line->number) +
                       "): the series goes back in time (--out-of-order drop skips such "
                       "samples)");
    }
    if (first) t0 = s.time_s;
    const double time_s = static_cast<double>(s.time_s - t0);
    latest = s.time_s;
    latest_line = &line;
    // The events this sample adds, counted before they are built (core/resources.hpp).
    changes += std::abs(static_cast<double>(s.alive) - static_cast<double>(alive.size()));
    check_memory_estimate(at(name, line.number) + "the trace's node events (about " +
                              std::to_string(static_cast<long long>(changes)) + ")",
                          changes * kBytesPerEvent, "use a trace with fewer instance changes");
    while (static_cast<int>(alive.size()) < s.alive) {
      alive.push_back("gcp-" + std::to_string(next_id++));
      if (first) {
        trace.initial.push_back(alive.back());
      } else {
        trace.events.push_back({time_s, AvailabilityChange::kAdd, alive.back(), 0.0});
      }
    }
    while (static_cast<int>(alive.size()) > s.alive) {  // newest first (documented rule)
      trace.events.push_back({time_s, AvailabilityChange::kRemove, alive.back(), 0.0});
      alive.pop_back();
    }
    first = false;
  }
  if (first) {
    throw InputError(at(name, lines.empty() ? 1 : lines.back().number) +
                     "empty trace: no 'YYYY-MM-DD, HH:MM:SS, N' lines");
  }
  trace.duration_s = static_cast<double>(latest - t0);
  return trace;
}

}  // namespace loom::trace_detail
