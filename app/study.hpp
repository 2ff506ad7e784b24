#pragma once
/// One what-if study, from config to a validated schedule: the part of the data flow
/// (config -> planner/scheduler -> Schedule IR) that every subcommand shares.
#include <memory>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/cost_model.hpp"
#include "core/model_flops.hpp"
#include "core/replica_fold.hpp"
#include "core/timeline.hpp"
#include "core/validate.hpp"
#include "schedulers/scheduler.hpp"

namespace loom {

struct Matching;

struct Study {
  Config config;
  std::unique_ptr<CostModel> cost;
  SchedulingProblem problem;  ///< parallel.dp is the simulated replicas when folded
  Schedule schedule;
  ReplicaFold fold;  ///< how many replicas the schedule holds of the job's parallel.dp
};

/// Whether a study may fold identical data-parallel replicas (core/replica_fold.hpp):
/// simulations may; a schedule that is printed, exported or executed holds every rank.
enum class Folding { kOff, kAllowed };

/// load_config, then every scheduler option checked against its scheduler's declaration
/// (schedulers/scheduler_options.hpp): the one way every command loads a config. Prints
/// each deprecation warning to stderr once per process ("loom: warning: ...").
Config load_study_config(const ConfigSource& config, const std::vector<std::string>& overrides);

/// Loads the config (load_study_config) and builds the cost model, workload and scheduling problem;
/// the schedule stays empty (for a schedule read from a file: app/schedule_import.hpp).
std::unique_ptr<Study> load_study(const ConfigSource& config,
                                  const std::vector<std::string>& overrides,
                                  Folding folding = Folding::kOff);

/// Loads the config, builds the cost model and workload, runs the configured scheduler,
/// validates the schedule and checks it fits GPU memory. Throws InputError /
/// InfeasibleError with messages that name the file and key. With Folding::kAllowed and a
/// symmetric job the schedule holds only `fold.simulated` replicas; a plan whose replicas
/// turn out to differ is rebuilt whole, and `fold.reason` says why.
std::unique_ptr<Study> prepare_study(const ConfigSource& config,
                                     const std::vector<std::string>& overrides,
                                     Folding folding = Folding::kOff);
/// prepare_study's second half, on a study load_study made: schedule, validate, fold.
void plan_study(Study& study);

/// Re-plans `study` with another partition view and returns the evaluator's iteration
/// time (what the partition choice alone is worth). `matching`: match_operations of the
/// study's schedule, where the caller holds it (used when the study's own plan answers).
double evaluate_with_view(const Study& study, PartitionView view,
                          const Matching* matching = nullptr);
/// The same for a view the study's own plan cannot answer: plans `problem` (a copy of the
/// study's, `replica_fold` replicas per simulated one) again under `view`, folding the job's
/// identical replicas wherever it can. Reads only `config` of the study and nothing of its
/// plan, so it may run while the study is being planned.
double evaluate_replanned(const Config& config, SchedulingProblem problem, PartitionView view,
                          int replica_fold);
/// Whether evaluate_with_view(study, view) must plan again (else it evaluates the study's
/// own plan).
bool view_needs_replanning(const Config& config, PartitionView view);

/// compute_metrics() of the study's schedule, its throughput in the workload's samples:
/// under workload.packing a schedule's sample is a pack, which holds several.
Metrics study_metrics(const Study& study, const Timeline& timeline);

/// Model TFLOP/s and tokens/s per GPU and MFU of the study's schedule at this iteration
/// time (core/model_flops.hpp), against the GPU's dense peak (cluster.peak_flops).
TrainingRates study_rates(const Study& study, double iteration_time_s);

/// The config's memory settings, for check_fits_memory's suggestions.
MemoryLevers memory_levers(const Config& config);

/// A warning when the config asks for something the planned schedule does not do
/// (parallel.overlap_grad_reduce where the data-parallel reduction stays one blocking
/// all-reduce: Chimera, hetero-*); "".
std::string unapplied_options(const Study& study);

}  // namespace loom
