#include "app/sweep/scheduler_table.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "app/sweep/pool.hpp"
#include "app/sweep/results.hpp"
#include "core/errors.hpp"
#include "schedulers/scheduler.hpp"

namespace loom::sweep {

std::vector<std::string> scheduler_list(const std::string& text) {
  std::vector<std::string> out;
  if (text == "all") {
    for (const SchedulerInfo& s : scheduler_registry()) out.emplace_back(s.name);
    return out;
  }
  std::stringstream ss(text);
  for (std::string name; std::getline(ss, name, ',');) {
    if (name.empty()) continue;
    try {
      find_scheduler(name);
    } catch (const InputError& e) {
      throw InputError(std::string("--schedulers: ") + e.what());
    }
    out.push_back(name);
  }
  if (out.empty()) throw InputError("--schedulers: expected \"all\" or names separated by commas");
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
        o.push_back("schedule.name=\"" + schedulers[i] + "\"");
        return to_message(run_point(
            config, o, timeline_dir.empty() ? "" : timeline_dir + "/" + schedulers[i] + ".csv"));
      },
      [&](size_t i, bool ok, const std::string& message) {
        rows[i].scheduler = schedulers[i];
        rows[i].result =
            ok ? from_message(message) : PointResult{"failed", "", "", "", "", "", message, 0};
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
  std::snprintf(line, sizeof line, "%-20s %14s %12s %8s %14s %9s\n", "scheduler", "iteration ms",
                "samples/s", "bubble", "peak mem GiB", "vs worst");
  os << line;
  for (const SchedulerRow* r : ok) {
    const double t = std::stod(r->result.iteration_time_s);
    std::snprintf(line, sizeof line, "%-20s %14.3f %12.4g %8.4f %14.3f %8.2fx\n",
                  r->scheduler.c_str(), t * 1e3, std::stod(r->result.throughput_samples_per_s),
                  std::stod(r->result.bubble_fraction),
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
  std::string csv =
      csv_line({"scheduler", "status", "iteration_time_s", "throughput_samples_per_s",
                "bubble_fraction", "peak_memory_max_bytes", "peak_memory_mean_bytes", "reason"});
  for (const SchedulerRow& r : rows) {
    const PointResult& p = r.result;
    csv +=
        csv_line({r.scheduler, p.status, p.iteration_time_s, p.throughput_samples_per_s,
                  p.bubble_fraction, p.peak_memory_max_bytes, p.peak_memory_mean_bytes, p.reason});
  }
  return csv;
}

}  // namespace loom::sweep
