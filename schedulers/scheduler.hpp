#pragma once
/// The scheduler interface: a scheduler is a pure function from a SchedulingProblem to a
/// Schedule (no I/O, no globals), registered by name, with the options it declares
/// (schedulers/scheduler_options.hpp). A new scheduler is one file in schedulers/ plus one
/// line in registry.cpp (docs/architecture.md, "How to add a scheduler").
#include <string>
#include <vector>

#include "core/cluster.hpp"
#include "core/config.hpp"
#include "core/cost_model.hpp"
#include "core/model.hpp"
#include "core/schedule.hpp"
#include "core/workload.hpp"
#include "schedulers/scheduler_options.hpp"

namespace loom {

struct SchedulingProblem {
  const Model* model = nullptr;
  const Cluster* cluster = nullptr;
  const CostModel* cost = nullptr;
  ParallelConfig parallel;
  ScheduleConfig schedule;
  MemoryConstants memory;
  /// The iteration's global batch: parallel.dp x schedule.microbatches x microbatch_size
  /// samples, assigned to replicas and microbatches in order.
  std::vector<Sample> samples;
  /// Optional explicit batching, set by schedulers that reorder or rebatch samples
  /// (disttrain, omnibal): assignment[replica][microbatch] -> indices into `samples`
  /// (microbatches may differ in size). Empty = in order, microbatch_size each.
  SampleAssignment assignment;
  /// Symmetric folding (core/replica_fold.hpp): each of the parallel.dp replicas planned
  /// stands for this many of the job's. What shards over the data-parallel group (ZeRO-1's
  /// optimizer state) shards over all parallel.dp x replica_fold of them.
  int replica_fold = 1;
  /// The job's data-parallel degree.
  int data_parallel() const { return parallel.dp * replica_fold; }
  /// The job's ranks holding the same experts (Megatron-Core's expert-data-parallel group):
  /// dp x cp / ep, one per expert-parallel group.
  int expert_data_parallel() const { return data_parallel() * parallel.cp / parallel.ep; }
};

using SchedulerFn = Schedule (*)(const SchedulingProblem&);

struct SchedulerInfo {
  const char* name;
  const char* summary;  ///< one line for `loom sim --help` and error messages
  SchedulerFn generate;
  /// The scheduler's own options (`[schedule.<name>]`); null = it takes none.
  std::vector<OptionSpec> (*options)() = nullptr;

  std::vector<OptionSpec> option_specs() const {
    return options ? options() : std::vector<OptionSpec>{};
  }
};

const std::vector<SchedulerInfo>& scheduler_registry();
/// Throws InputError listing the valid names when `name` is unknown.
const SchedulerInfo& find_scheduler(const std::string& name);

}  // namespace loom
