#include "app/sweep/slurm.hpp"

#include <filesystem>

namespace loom::sweep {
namespace {

/// Single-quoted for the shell.
std::string sh(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

std::string slurm_script(const SlurmOptions& o) {
  const std::string n = std::to_string(o.tasks);
  std::string s = "#!/bin/bash\n";
  s += "#SBATCH --job-name=loom-sweep-" + std::filesystem::path(o.study).stem().string() + "\n";
  s += "#SBATCH --array=0-" + std::to_string(o.tasks - 1) + "\n";
  s += "#SBATCH --ntasks=1\n";
  s += "#SBATCH --cpus-per-task=" + std::to_string(o.cpus_per_task) + "\n";
  s += "#SBATCH --output=" + o.out + "/slurm-%A_%a.out\n";
  if (!o.time.empty()) s += "#SBATCH --time=" + o.time + "\n";
  if (!o.mem.empty()) s += "#SBATCH --mem=" + o.mem + "\n";
  if (!o.partition.empty()) s += "#SBATCH --partition=" + o.partition + "\n";
  if (!o.account.empty()) s += "#SBATCH --account=" + o.account + "\n";
  s += "# Written by `loom sweep --slurm`: array task I runs shard I/" + n + " of the study.\n";
  s += "#   submit: sbatch " + o.out + "/sweep.sbatch\n";
  s += "#   then:   " + o.loom + " sweep merge " + o.out + "/shard-* --out " + o.out + "\n";
  s += "set -euo pipefail\n";
  s += "exec " + sh(o.loom) + " sweep " + sh(o.study) + " --shard \"${SLURM_ARRAY_TASK_ID}/" + n +
       "\" --out " + sh(o.out) + "/shard-\"${SLURM_ARRAY_TASK_ID}\" -j \"${SLURM_CPUS_PER_TASK:-" +
       std::to_string(o.cpus_per_task) + "}\" --resume\n";
  return s;
}

}  // namespace loom::sweep
