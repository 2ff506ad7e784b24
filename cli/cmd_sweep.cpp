// `loom sweep STUDY.toml`: a what-if study of many points (docs/sweep.md); `loom sweep
// merge` joins shards' results; `loom sweep --slurm` writes a Slurm job-array script.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "app/sweep/pool.hpp"
#include "app/sweep/results.hpp"
#include "app/sweep/runner.hpp"
#include "app/sweep/slurm.hpp"
#include "app/sweep/study_file.hpp"
#include "cli/commands.hpp"
#include "core/errors.hpp"

namespace loom {
namespace {

struct SweepCli {
  sweep::SweepOptions run;
  std::string shard;
  bool json = false;
  bool slurm = false;
  bool force = false;  ///< start over in an --out that holds results
  sweep::SlurmOptions slurm_options;
  std::vector<std::string> merge_inputs;
  std::string merge_out;
  CLI::App* merge = nullptr;
};

std::string absolute(const std::string& p) {
  return std::filesystem::absolute(p).lexically_normal().string();
}

std::string self_path() {
  std::error_code ec;
  const auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw std::runtime_error("cannot find the loom binary: " + ec.message());
  return p.string();
}

int write_slurm(SweepCli& o) {
  // Check the whole study here, not in four array tasks on the cluster.
  const sweep::StudyFile study = sweep::parse_study(o.run.study);
  sweep::check_axes(study);
  if (o.slurm_options.tasks < 1) throw InputError("--tasks: must be >= 1");
  sweep::SlurmOptions s = o.slurm_options;
  s.loom = self_path();
  s.study = absolute(o.run.study);
  s.out = absolute(o.run.out);
  std::filesystem::create_directories(s.out);
  const std::string path = s.out + "/sweep.sbatch";
  std::ofstream(path) << sweep::slurm_script(s);
  std::filesystem::permissions(path, std::filesystem::perms::owner_exec,
                               std::filesystem::perm_options::add);
  std::cout << "wrote " << path << " (" << s.tasks << " array tasks, "
            << sweep::expand(study).size() << " points)\n"
            << "submit: sbatch " << path << "\n"
            << "merge:  " << s.loom << " sweep merge " << s.out << "/shard-* --out " << s.out
            << "\n";
  return 0;
}

int run(SweepCli& o) {
  if (o.merge->parsed()) {
    const auto [rows, points] = sweep::merge_results(o.merge_inputs, o.merge_out);
    std::cout << "merged " << o.merge_inputs.size() << " inputs: " << rows << " of " << points
              << " points; wrote " << o.merge_out << "/{results.csv, results.json}\n";
    if (rows < points) std::cerr << "loom: warning: " << points - rows << " points are missing\n";
    return 0;
  }
  if (o.run.study.empty()) throw InputError("loom sweep: STUDY.toml is required");
  if (!std::filesystem::is_regular_file(o.run.study))
    throw InputError(o.run.study + ": no such study file");
  if (o.run.out.empty()) o.run.out = "out/" + std::filesystem::path(o.run.study).stem().string();
  if (o.slurm) return write_slurm(o);
  if (!o.shard.empty()) std::tie(o.run.shard, o.run.shards) = sweep::parse_shard(o.shard);
  if (o.run.jobs < 1) throw InputError("-j: must be >= 1");
  namespace fs = std::filesystem;
  if (!o.run.resume && !o.force && fs::is_directory(o.run.out) && !fs::is_empty(o.run.out)) {
    throw InputError("--out " + o.run.out +
                     ": holds the results of an earlier run; pass --resume to finish it, "
                     "--force to start over, or choose another --out");
  }
  const sweep::SweepSummary s = sweep::run_sweep(o.run);
  if (o.json) {
    std::ifstream in(o.run.out + "/results.json");
    std::cout << in.rdbuf();
  } else {
    std::cout << (o.run.shards > 1 ? "shard " + o.shard + ": " : "") << s.in_shard << " of "
              << s.points << " points (" << s.resumed << " from an earlier run, " << s.ran
              << " run): ok " << s.ok << ", infeasible " << s.infeasible << ", failed " << s.failed
              << "\nwrote " << o.run.out << "/{results.csv, results.json}\n";
  }
  if (s.ran > 0) {
    // Where the time went (stderr: stdout and the files stay byte-identical).
    const double per_point = s.run_s * o.run.jobs / static_cast<double>(s.ran);
    std::fprintf(stderr,
                 "loom: %.2f s checking and resolving %zu points, %.2f s running %zu with -j %d "
                 "(%.1f points/s); per point %.3f ms planning + simulating, %.3f ms overhead\n",
                 s.prepare_s, s.in_shard, s.run_s, s.ran, o.run.jobs,
                 static_cast<double>(s.ran) / s.run_s, s.point_s / static_cast<double>(s.ran) * 1e3,
                 (per_point - s.point_s / static_cast<double>(s.ran)) * 1e3);
  }
  if (s.interrupted) {
    std::cerr << "loom: interrupted: " << s.ok + s.infeasible + s.failed << " of " << s.in_shard
              << " points are in " << o.run.out
              << "/results.csv; run again with --resume to finish\n";
    return 130;
  }
  return 0;
}

}  // namespace

CommandRun attach_sweep(CLI::App& sub) {
  auto o = std::make_shared<SweepCli>();
  o->run.jobs = sweep::core_count();
  sub.add_option("STUDY", o->run.study, "Study file (TOML: base, axes, schedulers, seeds)");
  sub.add_option("--out", o->run.out, "Results directory (default: out/<study name>)");
  sub.add_option("-j,--jobs", o->run.jobs, "Points run at once (default: the core count)");
  sub.add_flag("--resume", o->run.resume,
               "Keep the rows of an earlier run in --out (matched by config hash); run the rest");
  sub.add_option("--shard", o->shard,
                 "Run slice I of N (I/N, 0-based): points with index % N == I");
  sub.add_flag("--json", o->json, "Print results.json instead of the summary");
  sub.add_flag("--force", o->force, "Start over in an --out that holds an earlier run's results");
  sub.add_flag("-q,--quiet", o->run.quiet, "No progress output");
  sub.add_flag("--slurm", o->slurm,
               "Write --out/sweep.sbatch (a Slurm job array, one shard per task) instead of "
               "running");
  sub.add_option("--tasks", o->slurm_options.tasks, "--slurm: array tasks (shards), default 4");
  sub.add_option("--cpus-per-task", o->slurm_options.cpus_per_task,
                 "--slurm: CPUs per task (the task's -j), default 1");
  sub.add_option("--time", o->slurm_options.time, "--slurm: time limit per task (e.g. 01:00:00)");
  sub.add_option("--mem", o->slurm_options.mem, "--slurm: memory per task (e.g. 4G)");
  sub.add_option("--partition", o->slurm_options.partition, "--slurm: partition");
  sub.add_option("--account", o->slurm_options.account, "--slurm: account");
  o->merge = sub.add_subcommand("merge", "Join the results of shards (directories or CSVs)");
  o->merge->add_option("DIR", o->merge_inputs, "Shard result directories")->required();
  o->merge->add_option("--out", o->merge_out, "Merged results directory")->required();
  return [o]() { return run(*o); };
}

}  // namespace loom
