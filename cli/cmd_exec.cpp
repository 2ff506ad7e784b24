// `loom exec CONFIG`: runs the schedule `loom sim` would simulate for real (executor/),
// writes the same files (metrics.json, timeline.json, timeline.csv, memory.csv,
// schedule.txt, plots) plus the gradient-equivalence check against a plain sequential
// run over the same samples.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>

#include "app/study.hpp"
#include "cli/checks.hpp"
#include "cli/commands.hpp"
#include "cli/output_dir.hpp"
#include "cli/run_output.hpp"
#include "core/errors.hpp"
#include "core/index.hpp"
#include "core/workload.hpp"
#include "executor/backend.hpp"
#include "executor/reference.hpp"

namespace loom {
namespace {

struct ExecCliOptions {
  std::string config;
  std::string out;
  std::string backend = "host";
  std::vector<std::string> overrides;
  std::uint64_t seed = 0;
  double timeout_s = 60;
  std::vector<int> fault;  ///< RANK OP
  int iterations = 1;
  bool no_check = false;
  bool no_plot = false;
  bool quiet = false;
  bool force = false;      ///< replace an existing --out folder
  std::string rendezvous;  ///< cuda: meet through this shared file instead of TCP
};

nlohmann::json check_json(const exec::GradientCheck& c) {
  nlohmann::json failures = nlohmann::json::array();
  for (size_t i = 0; i < c.failures.size() && i < 20; ++i) failures.push_back(c.failures[i]);
  return {{"passed", c.passed()},
          {"tolerance_relative_l2", c.tolerance},
          {"max_relative_error", c.max_relative_error},
          {"worst_tensor", c.worst},
          {"tensors_checked", c.tensors_checked},
          {"failures", failures},
          {"failure_count", c.failures.size()}};
}

/// Rough host work of one iteration: 6 x parameters x tokens per layer and sample (forward
/// 2, backward 4), plus the same again for the sequential reference.
double iteration_flops(const Study& study) {
  const Model& model = study.config.model;
  double flops = 0;
  for (const Sample& sample : study.problem.samples) {
    for (int l = 0; l < model.num_layers(); ++l) {
      const ModuleId module = model.module_of(l);
      flops += 6 * layer_parameters(model.layer(l)) * module_input_tokens(model, module, sample);
    }
  }
  return 2 * flops;
}

/// Runs `iterations` iterations and returns the one with the median time; timing noise
/// (other processes on the cores) is cut that way, numerics are identical in every run.
exec::ExecResult run_median(exec::Executor& executor, const exec::ExecProblem& problem,
                            const exec::ExecOptions& options, int iterations,
                            std::vector<double>& iteration_s) {
  std::vector<exec::ExecResult> runs;
  for (int i = 0; i < iterations; ++i) {
    runs.push_back(executor.run(problem, options));
    iteration_s.push_back(runs.back().timeline.iteration_time_s());
  }
  std::vector<size_t> order(runs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return iteration_s[a] < iteration_s[b]; });
  return std::move(runs[order[order.size() / 2]]);
}

int run_exec(const ExecCliOptions& o) {
  const auto executor = exec::make_executor(o.backend);
  // cuda runs one process per GPU and every process ends with the same complete result:
  // only rank 0 reports, checks and writes --out; the others exit 0 once their part ran.
  const bool writer = executor->process_rank() == 0;
  const bool quiet = o.quiet || !writer;
  if (!quiet) std::cerr << "loom: planning " << o.config << " ...\n";
  const auto study = prepare_study(o.config, o.overrides);
  keep_freed_memory();
  const exec::ExecProblem problem{&study->schedule, &study->config.model, &study->problem.samples,
                                  o.seed};
  exec::ExecOptions options;
  options.timeout_s = o.timeout_s;
  options.rendezvous_file = o.rendezvous;
  options.collect_tensors = !o.no_check;
  if (!o.fault.empty()) {
    const Schedule& s = study->schedule;
    if (o.fault[0] < 0 || o.fault[0] >= s.num_ranks() || o.fault[1] < 0 ||
        o.fault[1] >= isize(s.programs[RankId{o.fault[0]}])) {
      throw InputError("--inject-fault " + std::to_string(o.fault[0]) + " " +
                       std::to_string(o.fault[1]) + ": the schedule has ranks 0.." +
                       std::to_string(s.num_ranks() - 1) +
                       " and that rank fewer operations (see schedule.txt of a run)");
    }
    options.fault = exec::FaultInjection{RankId{o.fault[0]}, o.fault[1]};
  }
  if (const double gflop = iteration_flops(*study) / 1e9; o.backend == "host" && gflop > 50) {
    // Paper-scale models are for the cuda backend; the host runs them, slowly.
    std::cerr << "loom: warning: about " << static_cast<long>(gflop)
              << " GFLOP for the iteration and its reference: roughly "
              << static_cast<long>(gflop / 5)
              << " s at the host's ~5 GFLOP/s; "
                 "configs/exec/ has host-scale models\n";
  }
  if (!quiet) {
    std::cerr << "loom: executing " << study->schedule.num_ops() << " operations on "
              << study->schedule.num_ranks() << " ranks with the " << executor->name()
              << " backend ...\n";
  }
  // Staged before the run: a refused --out fails now, and an interrupt removes the staging.
  std::optional<OutputDir> out;
  if (writer) {
    out.emplace(
        o.out.empty() ? "out/exec-" + std::filesystem::path(o.config).stem().string() : o.out,
        o.force);
  }
  exec::ExecResult result;
  std::vector<double> iteration_s;
  try {
    result = run_median(*executor, problem, options, o.iterations, iteration_s);
  } catch (const exec::ExecError& e) {
    std::cerr << "loom: exec failed: " << e.what() << "\n";
    return 1;
  }
  if (!writer) return 0;
  nlohmann::json extra = {
      {"seed", o.seed}, {"executor", executor->name()}, {"iterations_s", iteration_s}};
  exec::GradientCheck check;
  if (!o.no_check) {
    if (!quiet) std::cerr << "loom: sequential reference run for the gradient check ...\n";
    try {
      check = exec::check_gradients(problem, result, exec::reference_gradients(problem, options));
    } catch (const exec::ExecError& e) {
      std::cerr << "loom: exec failed in the sequential reference: " << e.what() << "\n";
      return 1;
    }
    extra["gradient_check"] = check_json(check);
  }
  const Metrics metrics = study_metrics(*study, result.timeline);
  write_run_files(*out, *study, result.timeline,
                  metrics_json(*study, metrics, study_rates(*study, metrics.iteration_time_s),
                               "exec-" + executor->name(), extra),
                  !o.no_plot);
  out->commit();

  std::ostream& os = std::cout;
  const Config& c = study->config;
  os << "scheduler " << study->schedule.scheduler << ", " << layout_summary(c) << ", "
     << c.schedule.microbatches << " microbatches of " << c.schedule.microbatch_size
     << ", executed on " << executor->name() << "\n";
  os << "iteration time   " << ms(metrics.iteration_time_s) << " (measured)\n";
  os << "throughput       " << metrics.throughput_samples_per_s << " samples/s\n";
  os << "bubble fraction  " << metrics.bubble_fraction << "\n";
  if (!o.no_check) {
    char err[32];
    std::snprintf(err, sizeof err, "%.3g", check.max_relative_error);
    os << "gradient check   " << (check.passed() ? "passed" : "FAILED") << ": "
       << check.tensors_checked
       << " trainable tensors (gradients, and parameters after the optimizer step) vs the "
          "sequential run, max relative error "
       << err << " (tolerance " << check.tolerance << ")\n";
    for (size_t i = 0; i < check.failures.size() && i < 5; ++i)
      os << "  " << check.failures[i] << "\n";
    if (check.failures.size() > 5) os << "  ... " << check.failures.size() - 5 << " more\n";
  }
  os << "wrote " << out->destination().string()
     << "/{metrics.json, timeline.json, timeline.csv, memory.csv, schedule.txt"
     << (o.no_plot ? "" : ", gantt.png, memory.png") << "}\n";
  return check.passed() ? 0 : 1;
}

}  // namespace

CommandRun attach_exec(CLI::App& sub) {
  auto o = std::make_shared<ExecCliOptions>();
  std::string backends;
  for (const std::string& n : exec::executor_names())
    backends += (backends.empty() ? "" : ", ") + n;
  sub.description(
      "Execute one training iteration of a config for real: the schedule `loom sim` predicts,\n"
      "with real tensors (activations, gradients, all-reduces), timed per operation. Writes the\n"
      "files `loom sim` writes, plus metrics.json's gradient_check: every trainable parameter's\n"
      "accumulated gradient vs a plain sequential run over the same samples (relative L2 error\n"
      "<= 1e-4). Exit 1 if a rank fails, a wait times out, or the check fails.\n"
      "Example: loom exec configs/exec/vlm-host.toml --out out/exec-vlm");
  sub.add_option("CONFIG", o->config, "TOML config (host-scale examples: configs/exec/)")
      ->required()
      ->check(CLI::ExistingFile);
  sub.add_option("--out", o->out,
                 "Output directory, replaced as a whole (default: out/exec-<config name>); in a "
                 "multi-process cuda launch only rank 0 writes it");
  sub.add_option(
         "--backend", o->backend,
         "host (threads as ranks, float math on the CPU) or cuda (this build: " + backends + ")")
      ->check(CLI::IsMember({"host", "cuda"}));
  sub.add_option("--set", o->overrides, "Override a config key: section.key=value (repeatable)");
  sub.add_option("--seed", o->seed, "Seed of the parameters and synthetic data (default 0)");
  sub.add_option("--timeout", o->timeout_s,
                 "Seconds every rank may sit waiting, none computing, before the run "
                 "fails as deadlocked (host; cuda: per wait) (default 60)")
      ->check(finite_range(0.001, 365 * 86400.0, " s"));
  sub.add_option("--inject-fault", o->fault,
                 "RANK OP: make rank RANK fail at its operation OP (tests the fault path)")
      ->expected(2);
  sub.add_option("--iterations", o->iterations,
                 "Run this many iterations and write the one with the median time (default 1)")
      ->check(CLI::Range(1, 1000));
  sub.add_option("--rendezvous", o->rendezvous,
                 "cuda, several processes: FILE on a file system all ranks share, through which "
                 "rank 0 hands out the NCCL id (instead of TCP to MASTER_ADDR:MASTER_PORT; "
                 "overrides LOOM_RENDEZVOUS_FILE). It must not exist at launch; rank 0 removes "
                 "it once all ranks joined. Only rank 0 writes --out and prints the summary");
  sub.add_flag("--no-check", o->no_check,
               "Skip the sequential reference and gradient check (a timing run: gradients and "
               "parameters stay on the GPUs)");
  sub.add_flag("--no-plot", o->no_plot, "Skip the Gantt and memory PNGs");
  sub.add_flag("--quiet,-q", o->quiet, "No progress messages on stderr");
  sub.add_flag("--force", o->force, "Replace --out if it holds the output of an earlier run");
  return [o]() { return run_exec(*o); };
}

}  // namespace loom
