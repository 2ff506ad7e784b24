// loom trace: inspect node-availability traces and generate synthetic ones.
//   loom trace info FILE        format, event counts, alive nodes, an alive-over-time line
//   loom trace generate ...     a seeded periodic or Poisson failure trace, as an events file
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/checks.hpp"
#include "cli/commands.hpp"
#include "cli/staging.hpp"
#include "core/errors.hpp"
#include "core/resources.hpp"
#include "core/units.hpp"
#include "traces/generators.hpp"
#include "traces/trace_io.hpp"

namespace loom {

namespace {

constexpr int kSparkColumns = 60;

/// Time-weighted mean alive count per column, drawn with eighth-blocks scaled to the max.
std::string alive_sparkline(const AvailabilityTrace& trace, int max_alive) {
  static const char* const kLevels[] = {" ", "▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
  const std::vector<AliveStep> steps = alive_steps(trace);
  const double span = trace.duration_s > 0 ? trace.duration_s : 1.0;
  std::string line;
  size_t s = 0;
  for (int c = 0; c < kSparkColumns; ++c) {
    const double lo = span * c / kSparkColumns, hi = span * (c + 1) / kSparkColumns;
    double area = 0;
    while (s + 1 < steps.size() && steps[s + 1].time_s <= lo) ++s;
    for (size_t k = s; k < steps.size() && steps[k].time_s < hi; ++k) {
      const double end = k + 1 < steps.size() ? steps[k + 1].time_s : hi;
      area += steps[k].alive * std::max(0.0, std::min(end, hi) - std::max(steps[k].time_s, lo));
    }
    const double mean = area / (hi - lo);
    const int level = max_alive > 0 ? static_cast<int>(std::lround(8.0 * mean / max_alive)) : 0;
    line += kLevels[std::clamp(level, 0, 8)];
  }
  return line;
}

int distinct_removal_times(const AvailabilityTrace& trace) {
  int n = 0;
  double last = -1;
  for (const AvailabilityEvent& e : trace.events) {
    if (e.change == AvailabilityChange::kRemove && e.time_s != last) ++n, last = e.time_s;
  }
  return n;
}

void print_info(const AvailabilityTrace& t, const TraceOptions& o) {
  const AliveStats s = alive_stats(t);
  std::cout << std::fixed << std::setprecision(2);
  std::cout << "trace      " << t.source << "\n"
            << "format     " << t.format << "\n"
            << "duration   " << t.duration_s << " s (" << t.duration_s / 3600 << " h)\n";
  if (t.format == "events") {
    std::cout << "events     " << t.initial.size() + t.events.size() << ": " << t.initial.size()
              << " adds at t = 0 (the initial cluster), " << s.adds << " later adds, " << s.removes
              << " removes\n";
  } else {
    std::cout << "events     " << t.events.size() << " derived from the counts: " << s.adds
              << " adds, " << s.removes << " removes; " << t.initial.size()
              << " nodes alive at t = 0\n";
  }
  if (t.dropped_out_of_order > 0) {
    std::cout << "dropped    " << t.dropped_out_of_order
              << " samples that went back in time (--out-of-order drop)\n";
  }
  std::cout << "nodes      " << s.distinct_nodes << " distinct; alive min " << s.min_alive
            << ", max " << s.max_alive << ", time-weighted mean " << s.mean_alive << "\n";
  const int instants = distinct_removal_times(t);
  if (instants > 0) {
    // Both rates: a preemption often takes several nodes at once (EC2 p3: 167 removals
    // at 79 instants), and papers quote either.
    std::cout << "removals   " << s.removes << ", one node every " << t.duration_s / s.removes / 60
              << " min; at " << instants << " distinct times, one every "
              << t.duration_s / instants / 60 << " min\n";
  }
  if (o.notice_s > 0) std::cout << "notice     " << o.notice_s << " s before each removal\n";
  std::cout << "alive      |" << alive_sparkline(t, s.max_alive) << "| 0.." << s.max_alive
            << " nodes over " << t.duration_s / 3600 << " h\n";
}

/// `trace info --json`: the numbers print_info shows, one field each.
void print_info_json(const AvailabilityTrace& t, const TraceOptions& o) {
  const AliveStats s = alive_stats(t);
  const nlohmann::json j = {{"trace", t.source},
                            {"format", t.format},
                            {"duration_s", t.duration_s},
                            {"initial_nodes", t.initial.size()},
                            {"events", t.events.size()},
                            {"adds", s.adds},
                            {"removes", s.removes},
                            {"removal_instants", distinct_removal_times(t)},
                            {"dropped_out_of_order", t.dropped_out_of_order},
                            {"distinct_nodes", s.distinct_nodes},
                            {"min_alive", s.min_alive},
                            {"max_alive", s.max_alive},
                            {"mean_alive", s.mean_alive},
                            {"notice_s", o.notice_s}};
  std::cout << j.dump(1) << "\n";
}

double seconds_option(const std::string& text, const char* flag) {
  const auto v = parse_seconds(text);
  if (!v || *v < 0) {
    throw InputError(std::string(flag) + ": expected a duration like 10min, 6h or 90s, got '" +
                     text + "'");
  }
  return *v;
}

/// Writes through a staging file renamed onto the destination (cli/staging.hpp), so a
/// failure or an interrupt leaves no half-written trace; `--out DIR` writes DIR/trace.csv.
std::string write_atomically(const AvailabilityTrace& trace, const std::string& path) {
  StagedFile out(path, "trace.csv");
  write_availability_csv(trace, out.path());
  out.commit();
  return out.destination().string();
}

CommandRun attach_info(CLI::App& sub) {
  struct Options {
    std::string file, format = "auto", out_of_order = "error", notice = "0", scale_text;
    std::string start = "0", max_duration = "0";
    double scale = 1;
    bool json = false;
  };
  auto o = std::make_shared<Options>();
  sub.add_option("FILE", o->file,
                 "Trace file (events: time_ms,add|remove,node; "
                 "counts: YYYY-MM-DD, HH:MM:SS, N)")
      ->required();
  sub.add_option("--format", o->format, "auto (default: detected from content), events, counts");
  sub.add_option("--out-of-order", o->out_of_order,
                 "Count samples that go back in time: error (default) or drop");
  sub.add_option("--notice", o->notice, "Preemption notice before each removal, e.g. 120s");
  sub.add_option("--time-scale", o->scale, "Multiply every time by this factor (default 1)")
      ->check(finite_range(1e-6, 1e6));
  sub.add_option("--start", o->start, "Start the trace at this time (e.g. 2h; default 0)");
  sub.add_option("--max-duration", o->max_duration, "Cut the trace after this long (0 = all)");
  sub.add_flag("--json", o->json, "Print the summary as JSON (one field per number)");
  return [o]() {
    TraceOptions opts;
    opts.format = parse_trace_format(o->format, "--format");
    if (o->out_of_order != "error" && o->out_of_order != "drop") {
      throw InputError("--out-of-order: expected error or drop, got '" + o->out_of_order + "'");
    }
    opts.out_of_order = o->out_of_order == "drop" ? OutOfOrder::kDrop : OutOfOrder::kError;
    opts.notice_s = seconds_option(o->notice, "--notice");
    opts.time_scale = o->scale;
    opts.start_s = seconds_option(o->start, "--start");
    opts.max_duration_s = seconds_option(o->max_duration, "--max-duration");
    const AvailabilityTrace trace = load_availability_trace(o->file, opts);
    if (o->json)
      print_info_json(trace, opts);
    else
      print_info(trace, opts);
    return 0;
  };
}

CommandRun attach_generate(CLI::App& sub) {
  struct Options {
    std::string kind, out, interval = "10min", rejoin = "10min", duration;
    int nodes = 30, failures = 0, min_alive = 1;
    double rate = 6;
    std::uint64_t seed = 1;
  };
  auto o = std::make_shared<Options>();
  sub.add_option("--kind", o->kind,
                 "periodic: one failure every --interval, no re-joins (dissertation §2.7.2);\n"
                 "poisson: failures at --rate per hour, each node back after --rejoin on average")
      ->required();
  sub.add_option("--out", o->out, "Write the trace here (events format)")->required();
  sub.add_option("--nodes", o->nodes, "Nodes alive at t = 0 (default 30, as in §2.7.1)");
  CLI::Option* interval =
      sub.add_option("--interval", o->interval, "periodic: time between failures (default 10min)");
  CLI::Option* failures = sub.add_option(
      "--failures", o->failures, "periodic: number of failures (default: until --min-alive)");
  CLI::Option* min_alive = sub.add_option("--min-alive", o->min_alive,
                                          "periodic: never go below this many nodes (default 1)");
  CLI::Option* rate = sub.add_option(
      "--rate", o->rate,
      "poisson: failures per hour of the whole cluster at full strength (default 6)");
  CLI::Option* rejoin = sub.add_option("--rejoin", o->rejoin,
                                       "poisson: mean re-join delay, 0 = never (default 10min)");
  sub.add_option("--duration", o->duration,
                 "Trace length (periodic default: the last failure; poisson default 6h)");
  sub.add_option("--seed", o->seed, "Random seed (default 1); same seed, same trace");
  return [o, interval, failures, min_alive, rate, rejoin]() {
    // A node name and an event take ~100 bytes each (strings, vectors, the writer).
    const double hours =
        (o->duration.empty() ? 6 * 3600.0 : seconds_option(o->duration, "--duration")) / 3600;
    const double events =
        o->kind == "periodic" ? std::max(1.0 * o->failures, 1.0 * o->nodes) : o->rate * hours * 2;
    check_memory_estimate("trace generate --nodes " + std::to_string(o->nodes) + " (about " +
                              std::to_string(static_cast<long long>(events)) + " events)",
                          (static_cast<double>(o->nodes) + events) * 128,
                          "use fewer --nodes (or a lower --rate or shorter --duration)");
    AvailabilityTrace trace;
    const double duration = o->duration.empty() ? 0 : seconds_option(o->duration, "--duration");
    if (o->kind == "periodic") {
      for (const CLI::Option* opt : {rate, rejoin}) {
        if (opt->count() > 0) throw InputError(opt->get_name() + " applies to --kind poisson only");
      }
      trace = generate_periodic_failures({o->nodes, seconds_option(o->interval, "--interval"),
                                          o->failures, o->min_alive, duration, o->seed});
    } else if (o->kind == "poisson") {
      for (const CLI::Option* opt : {interval, failures, min_alive}) {
        if (opt->count() > 0)
          throw InputError(opt->get_name() + " applies to --kind periodic only");
      }
      trace = generate_poisson_failures({o->nodes, o->rate, seconds_option(o->rejoin, "--rejoin"),
                                         o->duration.empty() ? 6 * 3600.0 : duration, o->seed});
    } else {
      throw InputError("--kind: expected periodic or poisson, got '" + o->kind + "'");
    }
    const std::string written = write_atomically(trace, o->out);
    const AliveStats s = alive_stats(trace);
    std::cout << "wrote " << written << ": " << trace.source << "; " << s.removes << " removals, "
              << s.adds << " re-joins over " << std::fixed << std::setprecision(2)
              << trace.duration_s / 3600 << " h, alive min " << s.min_alive << "\n";
    return 0;
  };
}

}  // namespace

CommandRun attach_trace(CLI::App& sub) {
  sub.require_subcommand(1);
  sub.footer(
      "Examples:\n"
      "  loom trace info traces/spot/ec2-p3.csv\n"
      "  loom trace info traces/spot/gcp-v100x1-east1c.txt --out-of-order drop\n"
      "  loom trace generate --kind periodic --interval 10min --failures 15 --out f10m.csv\n"
      "  loom trace generate --kind poisson --rate 7.8 --rejoin 10min --duration 12h --out "
      "churn.csv\n"
      "Formats, options and the shipped traces: docs/traces.md.\n"
      "Exit codes: 0 ok; 2 invalid input (names file:line); 1 internal error.");
  auto runs = std::make_shared<std::vector<std::pair<CLI::App*, CommandRun>>>();
  CLI::App* info = sub.add_subcommand(
      "info", "Summarize a trace: format, events, alive nodes (min/max/mean), alive over time");
  runs->emplace_back(info, attach_info(*info));
  CLI::App* gen = sub.add_subcommand(
      "generate", "Write a seeded synthetic failure trace (periodic or Poisson) as an events file");
  runs->emplace_back(gen, attach_generate(*gen));
  return [runs]() {
    for (const auto& [cmd, run] : *runs) {
      if (cmd->parsed()) return run();
    }
    return 2;
  };
}

}  // namespace loom
