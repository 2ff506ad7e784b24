#pragma once
/// `loom sim CONFIG --schedulers all|a,b,c`: every scheduler on the same workload and
/// cluster, one table. An entry may carry the scheduler's own options,
/// `interleaved-1f1b:chunks=2:microbatch_group_size=4`, so each runs in its stated form
/// (the same scheduler may appear twice with different options). Each scheduler runs in its own
/// process (pool.hpp), so SimGrid runs too; a scheduler that does not apply to the config is a row
/// with the reason (the InputError it raised).
#include <ostream>
#include <string>
#include <vector>

#include "app/sweep/point.hpp"

namespace loom::sweep {

struct SchedulerRow {
  std::string scheduler;
  PointResult result;
};

/// "all" -> every registered scheduler; "a,b:key=value" -> those entries. Throws
/// InputError naming the entry, with the nearest spelling, for an unknown scheduler or
/// option.
std::vector<std::string> scheduler_list(const std::string& text);

/// One entry, "name[:key=value...]", as the overrides that run it: schedule.name and
/// schedule.<name>.<key> (schedulers/scheduler_options.hpp).
std::vector<std::string> scheduler_overrides(const std::string& entry);

/// The entry as a file name ("interleaved-1f1b:chunks=2" -> "interleaved-1f1b_chunks-2").
std::string entry_file_name(const std::string& entry);

/// Runs `config` with `overrides` once per scheduler, `jobs` at a time (each in a fresh
/// process when `fresh_process`: SimGrid); rows in the order of `schedulers`. Returns
/// early with what finished if interrupted (SIGINT). With `timeline_dir`, each ok
/// scheduler's timeline goes to `timeline_dir/<scheduler>.csv` (for the Gantt grid).
std::vector<SchedulerRow> run_schedulers(const std::string& config,
                                         const std::vector<std::string>& overrides,
                                         const std::vector<std::string>& schedulers, int jobs,
                                         bool fresh_process, const std::string& timeline_dir = "");

/// The text table: ok rows sorted by iteration time with their speed-up over the slowest,
/// then the infeasible and not-applicable schedulers with their reasons.
void print_scheduler_table(const std::vector<SchedulerRow>& rows, std::ostream& os);

/// schedulers.csv: `scheduler,status,iteration_time_s,throughput_samples_per_s,
/// bubble_fraction,peak_memory_max_bytes,peak_memory_mean_bytes,tflops_per_gpu,mfu,
/// tokens_per_s_per_gpu,busiest_link_utilisation,busiest_link_tier,reason`, in `rows` order
/// (`scheduler`: the entry as given).
std::string scheduler_csv(const std::vector<SchedulerRow>& rows);

}  // namespace loom::sweep
