// Trace importers: the shipped files load with the counts stated in traces/README.md,
// malformed input names its line, and the loading options do what they say.
#include "traces/trace_io.hpp"

#include <gtest/gtest.h>

#include <sstream>

#include "core/errors.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

AvailabilityTrace load(const std::string& relative, TraceOptions options = {}) {
  return load_availability_trace(test::source_path(relative), options);
}

AvailabilityTrace parse(const std::string& text, TraceOptions options = {}) {
  std::istringstream in(text);
  return read_availability_trace(in, "t.csv", options);
}

/// The InputError message of parsing `text`; fails the test if it parses.
std::string error_of(const std::string& text, TraceOptions options = {}) {
  try {
    parse(text, options);
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no InputError for:\n" << text;
  return "";
}

TEST(TraceFiles, Ec2P3MatchesTheBambooReadme) {
  // traces/README.md (from Bamboo): 344 events over 11.37 h, up to 32 nodes alive.
  const AvailabilityTrace t = load("traces/spot/ec2-p3.csv");
  EXPECT_EQ(t.format, "events");
  EXPECT_EQ(t.initial.size() + t.events.size(), 344u);
  EXPECT_EQ(t.initial.size(), 18u);  // the adds at t = 0 are the starting cluster
  EXPECT_DOUBLE_EQ(t.duration_s, 40920.0);
  EXPECT_NEAR(t.duration_s / 3600, 11.37, 0.005);
  const AliveStats s = alive_stats(t);
  EXPECT_EQ(s.max_alive, 32);
  EXPECT_EQ(s.adds, 177 - 18);
  EXPECT_EQ(s.removes, 167);
}

TEST(TraceFiles, Ec2G4dnMatchesTheBambooReadme) {
  const AvailabilityTrace t = load("traces/spot/ec2-g4dn.csv");
  EXPECT_EQ(t.initial.size() + t.events.size(), 153u);
  EXPECT_NEAR(t.duration_s / 3600, 10.77, 0.005);
  EXPECT_TRUE(t.initial.empty());  // its first node arrives at 8 min
  EXPECT_DOUBLE_EQ(t.events.front().time_s, 480.0);
}

TEST(TraceFiles, OobleckControlledFailures) {
  // 30 nodes at t = 0, then 15 removals at a fixed interval, no re-joins (§2.7.2).
  const std::pair<const char*, double> kIntervals[] = {
      {"5m", 298.8}, {"10m", 601.2}, {"30m", 1800}, {"1h", 3600}, {"3h", 10800}, {"6h", 21600}};
  for (const auto& [name, interval] : kIntervals) {
    const AvailabilityTrace t = load(std::string("traces/oobleck/") + name + ".csv");
    ASSERT_EQ(t.initial.size(), 30u) << name;
    ASSERT_EQ(t.events.size(), 15u) << name;
    for (size_t k = 0; k < t.events.size(); ++k) {
      EXPECT_EQ(t.events[k].change, AvailabilityChange::kRemove);
      EXPECT_NEAR(t.events[k].time_s, interval * static_cast<double>(k + 1), 1e-6) << name;
    }
    EXPECT_EQ(alive_stats(t).min_alive, 15) << name;
  }
}

TEST(TraceFiles, GcpCountSeries) {
  const AvailabilityTrace a100 = load("traces/spot/gcp-a100x1-east1b.txt");
  EXPECT_EQ(a100.format, "counts");
  EXPECT_EQ(a100.initial.size(), 55u);  // the first sample's count
  EXPECT_EQ(a100.dropped_out_of_order, 0);
  // The alive count follows the samples: the last one says 64.
  EXPECT_EQ(alive_steps(a100).back().alive, 64);

  // The v100 file goes back in time on line 4: an error by default ...
  const std::string message = [] {
    try {
      load("traces/spot/gcp-v100x1-east1c.txt");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  }();
  EXPECT_NE(message.find("gcp-v100x1-east1c.txt:4:"), std::string::npos) << message;
  EXPECT_NE(message.find("goes back in time"), std::string::npos) << message;
  // ... and with the explicit option its 15 such samples are dropped and counted.
  TraceOptions drop;
  drop.out_of_order = OutOfOrder::kDrop;
  const AvailabilityTrace v100 = load("traces/spot/gcp-v100x1-east1c.txt", drop);
  EXPECT_EQ(v100.dropped_out_of_order, 15);
  EXPECT_EQ(v100.initial.size(), 80u);
  EXPECT_NO_THROW(check_availability_trace(v100));
}

TEST(TraceParse, CountsBecomeEventsOfSyntheticNodes) {
  const AvailabilityTrace t = parse(
      "2021-12-31, 23:59:50, 2\n"
      "2022-01-01, 00:00:10, 4\n"  // crosses a year: +20 s
      "2022-01-01, 00:00:10, 4\n"  // no change, no event
      "2022-01-01, 00:01:00, 1\n");
  EXPECT_EQ(t.initial, (std::vector<std::string>{"gcp-1", "gcp-2"}));
  ASSERT_EQ(t.events.size(), 5u);
  EXPECT_EQ(t.events[0].node, "gcp-3");
  EXPECT_DOUBLE_EQ(t.events[0].time_s, 20.0);
  // A fall removes the most recently added nodes first.
  EXPECT_EQ(t.events[2].node, "gcp-4");
  EXPECT_EQ(t.events[3].node, "gcp-3");
  EXPECT_EQ(t.events[4].node, "gcp-2");
  EXPECT_EQ(t.events[4].change, AvailabilityChange::kRemove);
  EXPECT_DOUBLE_EQ(t.duration_s, 70.0);
}

TEST(TraceParse, EventsWithCommentsCrlfAndDuration) {
  const AvailabilityTrace t =
      parse("# a comment\r\n0,add,a\r\n0,add,b\r\n\r\n1500,remove,a\r\n# duration_s=10\r\n");
  EXPECT_EQ(t.initial, (std::vector<std::string>{"a", "b"}));
  ASSERT_EQ(t.events.size(), 1u);
  EXPECT_DOUBLE_EQ(t.events[0].time_s, 1.5);
  EXPECT_DOUBLE_EQ(t.duration_s, 10.0);
  EXPECT_EQ(alive_at(t, 1.49), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(alive_at(t, 1.5), (std::vector<std::string>{"b"}));
}

TEST(TraceParse, MalformedInputNamesTheLine) {
  const std::pair<std::string, std::vector<std::string>> kCases[] = {
      {"0,add,a\n100,add,b\n50,remove,a\n", {"t.csv:3:", "before the previous", "sorted"}},
      {"0,add,a\n100,remove,b\n", {"t.csv:2:", "'b'", "not alive"}},
      {"0,add,a\n100,add,a\n", {"t.csv:2:", "already alive", "line 1"}},
      {"0,add,a\n100,fail,a\n", {"t.csv:2:", "bad event 'fail'"}},
      {"0,add,a\n1e,remove,a\n", {"t.csv:2:", "bad time_ms '1e'"}},
      {"0,add,a\n-5,remove,a\n", {"t.csv:2:", "bad time_ms '-5'"}},
      {"0,add,a\n100,remove\n", {"t.csv:2:", "expected 3 fields"}},
      {"0,add,a\n100,remove,\n", {"t.csv:2:", "empty node name"}},
      {"", {"t.csv:1:", "empty trace"}},
      {"# only a comment\n\n", {"t.csv:2:", "empty trace"}},
      {"hello\n", {"t.csv:1:", "cannot tell the trace format"}},
      {"2021-12-10, 13:07:45, 8\n2021-13-10, 13:08:45, 7\n", {"t.csv:2:", "bad date"}},
      {"2021-12-10, 13:07:45, 8\n2021-12-10, 13:61:45, 7\n", {"t.csv:2:", "bad time"}},
      {"2021-12-10, 13:07:45, 8\n2021-12-10, 13:08:45, x\n", {"t.csv:2:", "bad count 'x'"}},
  };
  for (const auto& [text, mentions] : kCases) {
    const std::string message = error_of(text);
    for (const std::string& m : mentions) {
      EXPECT_NE(message.find(m), std::string::npos) << "'" << m << "' not in: " << message;
    }
  }
}

TEST(TraceParse, ForcedFormatReportsTheLine) {
  TraceOptions counts;
  counts.format = TraceFormat::kCounts;
  EXPECT_NE(error_of("0,add,a\n", counts).find("t.csv:1: bad date"), std::string::npos);
  EXPECT_THROW(parse_trace_format("csv", "--format"), InputError);
  EXPECT_EQ(parse_trace_format("counts", "--format"), TraceFormat::kCounts);
}

TEST(TraceOptions, NoticeLeadTimeOnRemovalsOnly) {
  TraceOptions o;
  o.notice_s = 120;
  const AvailabilityTrace t = parse(
      "0,add,a\n0,add,b\n60000,remove,a\n300000,add,a\n"
      "600000,remove,b\n",
      o);
  ASSERT_EQ(t.events.size(), 3u);
  EXPECT_DOUBLE_EQ(t.events[0].notice_s, 60.0);  // clamped: no warning before the start
  EXPECT_DOUBLE_EQ(t.events[1].notice_s, 0.0);   // an add has no notice
  EXPECT_DOUBLE_EQ(t.events[2].notice_s, 120.0);
  EXPECT_DOUBLE_EQ(t.events[2].time_s, 600.0);  // the event itself does not move
}

TEST(TraceOptions, ScaleAndWindow) {
  TraceOptions o;
  o.time_scale = 0.5;
  o.start_s = 100;
  o.max_duration_s = 200;
  // Scaled: removes at 50 s (a), 150 s (b), add c at 250 s, remove c at 400 s; end 500 s.
  const AvailabilityTrace t = parse(
      "0,add,a\n0,add,b\n100000,remove,a\n300000,remove,b\n500000,add,c\n"
      "800000,remove,c\n# duration_s=1000\n",
      o);
  EXPECT_EQ(t.initial, (std::vector<std::string>{"b"}));  // alive at the window's start
  ASSERT_EQ(t.events.size(), 2u);
  EXPECT_DOUBLE_EQ(t.events[0].time_s, 50.0);
  EXPECT_DOUBLE_EQ(t.events[1].time_s, 150.0);
  EXPECT_DOUBLE_EQ(t.duration_s, 200.0);
  o.start_s = 600;
  EXPECT_NE(error_of("0,add,a\n# duration_s=1000\n", o).find("not before the end"),
            std::string::npos);
  // A start alone keeps everything after it, including events at the trace's very end.
  TraceOptions from;
  from.start_s = 3600;
  const AvailabilityTrace p3 = load("traces/spot/ec2-p3.csv");
  const AvailabilityTrace late = load("traces/spot/ec2-p3.csv", from);
  EXPECT_DOUBLE_EQ(late.duration_s, p3.duration_s - 3600);
  EXPECT_DOUBLE_EQ(late.events.back().time_s, p3.events.back().time_s - 3600);
  EXPECT_EQ(late.events.back().node, p3.events.back().node);
  EXPECT_EQ(alive_steps(late).back().alive, alive_steps(p3).back().alive);
}

TEST(TraceWrite, RoundTripsExactly) {
  AvailabilityTrace t = load("traces/spot/ec2-p3.csv");
  std::ostringstream out;
  write_availability_csv(t, out);
  std::istringstream in(out.str());
  const AvailabilityTrace back = read_availability_trace(in, t.source, {});
  EXPECT_EQ(back.initial, t.initial);
  ASSERT_EQ(back.events.size(), t.events.size());
  for (size_t i = 0; i < t.events.size(); ++i) {
    EXPECT_EQ(back.events[i].time_s, t.events[i].time_s);
    EXPECT_EQ(back.events[i].node, t.events[i].node);
    EXPECT_EQ(back.events[i].change, t.events[i].change);
  }
  EXPECT_EQ(back.duration_s, t.duration_s);
  // A name the format cannot hold is refused instead of written ambiguously.
  t.events[0].node = "a,b";
  EXPECT_THROW(write_availability_csv(t, out), InputError);
}

TEST(TraceCheck, RejectsInconsistentTraces) {
  AvailabilityTrace t;
  t.source = "made";
  t.initial = {"a"};
  t.events = {{10, AvailabilityChange::kRemove, "a", 0}, {5, AvailabilityChange::kAdd, "a", 0}};
  t.duration_s = 20;
  EXPECT_THROW(check_availability_trace(t), InputError);  // unsorted
  t.events = {{10, AvailabilityChange::kRemove, "a", 11}};
  EXPECT_THROW(check_availability_trace(t), InputError);  // notice before time 0
  t.events = {{10, AvailabilityChange::kRemove, "a", 5}};
  t.duration_s = 9;
  EXPECT_THROW(check_availability_trace(t), InputError);  // ends before its last event
  t.duration_s = 10;
  EXPECT_NO_THROW(check_availability_trace(t));
}

TEST(TraceCivilTime, KnownDates) {
  // Spot checks of the calendar arithmetic the count importer relies on.
  AvailabilityTrace t = parse("2020-02-28, 00:00:00, 1\n2020-03-01, 00:00:00, 2\n");
  EXPECT_DOUBLE_EQ(t.duration_s, 2 * 86400.0);  // 2020 is a leap year
  t = parse("2021-02-28, 00:00:00, 1\n2021-03-01, 00:00:00, 2\n");
  EXPECT_DOUBLE_EQ(t.duration_s, 86400.0);
  EXPECT_NE(error_of("2021-02-29, 00:00:00, 1\n").find("bad date"), std::string::npos);
}

}  // namespace
}  // namespace loom
