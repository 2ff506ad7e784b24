#pragma once
/// `loom sweep STUDY --slurm`: a Slurm job-array script with one shard of the study per
/// array task; `loom sweep merge DIR/shard-*` joins their results afterwards.
#include <string>

namespace loom::sweep {

struct SlurmOptions {
  std::string loom;   ///< absolute path of the loom binary the tasks run
  std::string study;  ///< absolute path of the study file
  std::string out;    ///< absolute results directory; shard i writes out/shard-i
  int tasks = 4;      ///< array tasks = shards
  int cpus_per_task = 1;
  std::string time;       ///< --time (empty: the partition's default)
  std::string mem;        ///< --mem
  std::string partition;  ///< --partition
  std::string account;    ///< --account
};

/// The sbatch script text. Tasks resume (`--resume`), so a requeued task keeps its rows.
std::string slurm_script(const SlurmOptions& o);

}  // namespace loom::sweep
