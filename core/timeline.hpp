#pragma once
/// The one trace record both backends emit, and the files written from it.
///
/// A backend reports, for every operation of every rank, when it started and ended:
///   Compute     the interval the rank computed
///   Send        posted -> the data arrived at the peer (the transfer; costs the rank nothing)
///   Recv        posted -> the data was available (the wait)
///   Collective  reached -> the rank's last ring step finished
/// Everything else (metrics, memory over time, the Chrome trace, the CSV) derives from the
/// schedule plus these timings, so predictions and measurements are written identically.
#include <iosfwd>
#include <string>
#include <vector>

#include "core/schedule.hpp"

namespace loom {

struct OpTiming {
  double start_s = 0;
  double end_s = 0;
};

struct Timeline {
  /// timings[rank][i] is the timing of schedule.programs[rank][i].
  PerRank<std::vector<OpTiming>> timings;
  double iteration_time_s() const;
  OpTiming& at(OpRef ref) { return timings[ref.rank][ref.index]; }
  const OpTiming& at(OpRef ref) const { return timings[ref.rank][ref.index]; }
};

struct RankMetrics {
  RankId rank;
  double busy_s = 0;               ///< time in Compute and OptimizerStep operations
  double peak_memory_bytes = 0;    ///< static memory + peak live activations
  int peak_live_microbatches = 0;  ///< microbatches whose activations are alive at once
};

struct Metrics {
  double iteration_time_s = 0;
  double throughput_samples_per_s = 0;
  /// 1 - sum(busy) / (ranks x iteration time)   (DESIGN.md)
  double bubble_fraction = 0;
  PerRank<RankMetrics> per_rank;
};

Metrics compute_metrics(const Schedule& schedule, const Timeline& timeline);

/// One row of memory.csv: a rank's allocated bytes from `time_s` on.
struct MemorySample {
  RankId rank;
  double time_s = 0;
  double parameters = 0;
  double gradients = 0;
  double optimizer = 0;
  double activations = 0;
};
/// Per-rank allocated bytes over time: static memory, plus activations allocated when a
/// forward starts and freed when the releasing backward ends.
std::vector<MemorySample> memory_over_time(const Schedule& schedule, const Timeline& timeline);

/// Peak live activation bytes and microbatches per rank, from program order alone (no
/// timing needed): what planners check against GPU memory before running anything.
struct ActivationPeak {
  double bytes = 0;
  int microbatches = 0;
};
PerRank<ActivationPeak> activation_peaks(const Schedule& schedule);

// Writers. Each writes one file; callers write into a staging directory and publish it
// atomically (cli/output_dir.hpp; core/io.hpp checks every write), so nothing half-written is left
// behind.
void write_timeline_csv(const std::string& path, const Schedule& schedule,
                        const Timeline& timeline);
void write_chrome_trace(const std::string& path, const Schedule& schedule,
                        const Timeline& timeline);
void write_memory_csv(const std::string& path, const std::vector<MemorySample>& samples);
// The CSVs' text, as the files hold it (the Python module's DataFrames read these).
void write_timeline_csv(std::ostream& out, const Schedule& schedule, const Timeline& timeline);
void write_memory_csv(std::ostream& out, const std::vector<MemorySample>& samples);

}  // namespace loom
