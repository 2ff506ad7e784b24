#include "app/sweep/scheduler_table.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "app/sweep/pool.hpp"
#include "app/sweep/results.hpp"
#include "core/errors.hpp"
#include "core/spelling.hpp"
#include "schedulers/scheduler.hpp"
#include "schedulers/scheduler_options.hpp"

namespace loom::sweep {

namespace {

struct Entry {
  std::string name;
  std::vector<std::pair<std::string, std::string>> options;  ///< key, value as written
};

/// "name[:key=value...]", the name and every key checked against the registry.
Entry parse_entry(const std::string& text) {
  Entry e;
  std::stringstream ss(text);
  std::getline(ss, e.name, ':');
  const std::string where = "--schedulers: '" + text + "': ";
  const SchedulerInfo* info = nullptr;
  try {
    info = &find_scheduler(e.name);
  } catch (const InputError& error) {
    throw InputError(where + error.what());
  }
  std::vector<std::string> keys;
  for (const OptionSpec& spec : info->option_specs()) keys.push_back(spec.key);
  for (std::string option; std::getline(ss, option, ':');) {
    const size_t eq = option.find('=');
    const std::string key = option.substr(0, eq);
    if (eq == std::string::npos || eq == 0 || eq + 1 == option.size())
      throw InputError(where + "expected KEY=VALUE after ':', found '" + option +
                       "' (e.g. interleaved-1f1b:chunks=2)");
    if (std::find(keys.begin(), keys.end(), key) == keys.end())
      throw InputError(where + e.name + " has no option '" + key + "'" + did_you_mean(key, keys) +
                       (keys.empty() ? " (it has none)" : "") + "; `loom schedulers " + e.name +
                       "` lists them");
    e.options.emplace_back(key, option.substr(eq + 1));
  }
  return e;
}

}  // namespace

std::vector<std::string> scheduler_list(const std::string& text) {
  std::vector<std::string> out;
  if (text == "all") {
    for (const SchedulerInfo& s : scheduler_registry()) out.emplace_back(s.name);
    return out;
  }
  std::stringstream ss(text);
  for (std::string entry; std::getline(ss, entry, ',');) {
    if (entry.empty()) continue;
    parse_entry(entry);
    out.push_back(entry);
  }
  if (out.empty())
    throw InputError(
        "--schedulers: expected \"all\" or names separated by commas, each with its options "
        "if any (1f1b,interleaved-1f1b:chunks=2)");
  return out;
}

std::vector<std::string> scheduler_overrides(const std::string& entry) {
  const Entry e = parse_entry(entry);
  std::vector<std::string> out = {"schedule.name=\"" + e.name + "\""};
  for (const auto& [key, value] : e.options)
    out.push_back("schedule." + e.name + "." + key + "=" + value);
  return out;
}

std::string entry_file_name(const std::string& entry) {
  std::string out = entry;
  for (char& c : out) {
    if (c == ':') c = '_';
    if (c == '=') c = '-';
  }
  return out;
}

std::vector<SchedulerRow> run_schedulers(const std::string& config,
                                         const std::vector<std::string>& overrides,
                                         const std::vector<std::string>& schedulers, int jobs,
                                         bool fresh_process, const std::string& timeline_dir) {
  std::vector<SchedulerRow> rows(schedulers.size());
  std::vector<bool> finished(schedulers.size());
  run_pool(
      schedulers.size(), jobs, fresh_process,
      [&](size_t i) {
        std::vector<std::string> o = overrides;
        for (std::string& entry : scheduler_overrides(schedulers[i])) o.push_back(std::move(entry));
        const std::string file = entry_file_name(schedulers[i]) + ".csv";
        return to_message(
            run_point(config, o, timeline_dir.empty() ? "" : timeline_dir + "/" + file));
      },
      [&](size_t i, bool ok, const std::string& message) {
        rows[i].scheduler = schedulers[i];
        if (ok) {
          rows[i].result = from_message(message);
        } else {
          rows[i].result.status = "failed";
          rows[i].result.reason = message;
        }
        finished[i] = true;
      });
  std::vector<SchedulerRow> out;
  for (size_t i = 0; i < rows.size(); ++i)
    if (finished[i]) out.push_back(std::move(rows[i]));
  return out;
}

void print_scheduler_table(const std::vector<SchedulerRow>& rows, std::ostream& os) {
  std::vector<const SchedulerRow*> ok;
  for (const SchedulerRow& r : rows)
    if (r.result.status == "ok") ok.push_back(&r);
  std::stable_sort(ok.begin(), ok.end(), [](const SchedulerRow* a, const SchedulerRow* b) {
    return std::stod(a->result.iteration_time_s) < std::stod(b->result.iteration_time_s);
  });
  double slowest = 0;
  for (const SchedulerRow* r : ok)
    slowest = std::max(slowest, std::stod(r->result.iteration_time_s));
  char line[256];
  int width = 20;  // the longest entry, options included
  for (const SchedulerRow* r : ok) width = std::max(width, isize(r->scheduler));
  std::snprintf(line, sizeof line, "%-*s %14s %12s %8s %12s %6s %14s %9s\n", width, "scheduler",
                "iteration ms", "samples/s", "bubble", "TFLOP/s/GPU", "MFU", "peak mem GiB",
                "vs worst");
  os << line;
  for (const SchedulerRow* r : ok) {
    const double t = std::stod(r->result.iteration_time_s);
    std::snprintf(line, sizeof line, "%-*s %14.3f %12.4g %8.4f %12.1f %5.1f%% %14.3f %8.2fx\n",
                  width, r->scheduler.c_str(), t * 1e3,
                  std::stod(r->result.throughput_samples_per_s),
                  std::stod(r->result.bubble_fraction), std::stod(r->result.tflops_per_gpu),
                  100 * std::stod(r->result.mfu),
                  std::stod(r->result.peak_memory_max_bytes) / (1024.0 * 1024 * 1024), slowest / t);
    os << line;
  }
  for (const SchedulerRow& r : rows) {
    if (r.result.status == "ok") continue;
    os << (r.result.status == "infeasible" ? "infeasible      " : "not applicable  ") << r.scheduler
       << ": " << r.result.reason << "\n";
  }
}

std::string scheduler_csv(const std::vector<SchedulerRow>& rows) {
  std::string csv = csv_line({"scheduler", "status", "iteration_time_s", "throughput_samples_per_s",
                              "bubble_fraction", "peak_memory_max_bytes", "peak_memory_mean_bytes",
                              "tflops_per_gpu", "mfu", "tokens_per_s_per_gpu",
                              "busiest_link_utilisation", "busiest_link_tier", "reason"});
  for (const SchedulerRow& r : rows) {
    const PointResult& p = r.result;
    csv += csv_line({r.scheduler, p.status, p.iteration_time_s, p.throughput_samples_per_s,
                     p.bubble_fraction, p.peak_memory_max_bytes, p.peak_memory_mean_bytes,
                     p.tflops_per_gpu, p.mfu, p.tokens_per_s_per_gpu, p.busiest_link_utilisation,
                     p.busiest_link_tier, p.reason});
  }
  return csv;
}

}  // namespace loom::sweep
