#pragma once
/// The files every run writes, whoever ran it (`loom sim` predicts, `loom exec`
/// measures): metrics.json, timeline.json, timeline.csv, memory.csv, schedule.txt and the
/// plots — one set of writers, so a prediction and a measurement compare file by file.
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "app/study.hpp"
#include "cli/output_dir.hpp"
#include "core/timeline.hpp"

namespace loom {

/// "12.345 ms"
std::string ms(double seconds);
/// "pp 4 x dp 1 x tp 1" for the single layout (with "x cp 2 (p2p)" under context
/// parallelism); with [parallel.modules] tables each layout's owner with its TP/CP/PP/DP
/// and GPUs ("vision tp 2 cp 1 pp 1 dp 2 on GPUs 4-7").
std::string layout_summary(const Config& c);
/// Where each parallel dimension's groups reach on the fabric, "tp 8 within a node, dp 64
/// across pods" (core/placement.hpp); "" with per-module layouts or nothing parallel.
std::string placement_summary(const Study& study);
/// The busiest link direction of each tier and its utilisation, from metrics.json's
/// `links` (core/link_load.hpp): "nic nic-3 up 41.2 %, ..."; "" when nothing leaves a GPU.
std::string busiest_links_summary(const nlohmann::json& metrics);

/// "model FLOPs      412.3 TFLOP/s per GPU, MFU 41.7 % of 989 TFLOP/s, 1602 tokens/s per
/// GPU": the summary line every run prints (core/model_flops.hpp's rule).
void print_rates(const TrainingRates& rates, double peak_flops, std::ostream& os);

/// metrics.json's content: the metrics and model-FLOP rates (study_rates), the layout and
/// cost model of `study`, the backend that produced the timeline, plus `extra` keys
/// (merged at the top level).
nlohmann::json metrics_json(const Study& study, const Metrics& metrics, const TrainingRates& rates,
                            const std::string& backend, const nlohmann::json& extra);

/// What a simulated run reports: its metrics, model-FLOP rates and metrics.json's content,
/// with the evaluator's iteration time under each partition view (`partition_views_evaluator_s`,
/// null for a schedule read from a file or one with schedule.stage_layers: no partition
/// was chosen). `loom sim` and the Python module's sim() both report this.
struct SimReport {
  Metrics metrics;
  TrainingRates rates;
  nlohmann::json views;  ///< {"true": s, "naive": s} or null
  nlohmann::json file;   ///< metrics.json
};
/// metrics.json's partition_views_evaluator_s: the iteration time (evaluator) of the plan the
/// scheduler makes under each partition view, {"true": s, "naive": s}; null for a fixed
/// layout (schedule.stage_layers) or a schedule file. The view other than the study's own is
/// planned again from the study's problem alone (seconds at scale), so `loom sim` starts it
/// on a second core while it plans the study, before the run.
class PartitionViews {
 public:
  /// Starts planning the views that need a plan of their own, from `study` as load_study
  /// left it (its problem is copied: the study may be planned meanwhile).
  PartitionViews(const Study& study, bool schedule_from_file);
  /// {"true": s, "naive": s} or null, once `study` is planned. `matching`: the study's
  /// schedule's, where the caller holds it.
  nlohmann::json get(const Study& study, const Matching* matching = nullptr);

 private:
  bool skipped_ = false;
  int assumed_fold_ = 1;  ///< the replica fold the replanned views were evaluated with
  std::map<PartitionView, std::future<double>> replanned_;
};
/// PartitionViews of a planned study, computed at once.
nlohmann::json partition_views(const Study& study, bool schedule_from_file);
SimReport sim_report(const Study& study, const Timeline& timeline, const std::string& backend,
                     nlohmann::json views);

/// Writes timeline.json, timeline.csv, memory.csv and schedule.txt into the staging
/// directory of `out`...
void write_timeline_files(const OutputDir& out, const Study& study, const Timeline& timeline,
                          const Matching* matching = nullptr);
/// ... then metrics.json, and the PNGs (which read all of them) unless `plot` is false.
void write_metrics_and_plots(const OutputDir& out, const nlohmann::json& metrics, bool plot);
/// Both, in that order.
void write_run_files(const OutputDir& out, const Study& study, const Timeline& timeline,
                     const nlohmann::json& metrics, bool plot);

/// Keeps freed host memory in the process (glibc: no mmap/munmap per tensor), so host
/// timings measure the math, not page faults on fresh pages: `loom profile` and `loom exec`
/// both call it, so profile and execution allocate alike.
void keep_freed_memory();

/// Runs `script` (in analysis/) with the system Python and `args`; false (and a warning on
/// stderr) if Python, matplotlib or the script is missing or it fails.
bool run_analysis_script(const std::string& script, const std::vector<std::string>& args);

/// Checks a `--png FILE` before the work that ends in the plot: its folder must exist and
/// it must not be a folder (InputError suggesting FOLDER/`example_name`).
void check_png_path(const std::string& png, const std::string& example_name);

}  // namespace loom
