// `loom sim CONFIG`: the default what-if study. Plans the schedule, runs it in a backend,
// writes metrics.json, timeline.json (Perfetto), timeline.csv, memory.csv, schedule.txt
// and the Gantt/memory plots into --out, and prints a summary.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "app/backends.hpp"
#include "app/run_progress.hpp"
#include "app/schedule_import.hpp"
#include "app/study.hpp"
#include "app/sweep/pool.hpp"
#include "app/sweep/scheduler_table.hpp"
#include "cli/commands.hpp"
#include "cli/output_dir.hpp"
#include "cli/run_output.hpp"
#include "core/errors.hpp"
#include "core/io.hpp"
#include "core/matching.hpp"
#include "core/timeline.hpp"

namespace loom {
namespace {

struct SimOptions {
  std::string config;
  std::string out;
  std::string backend;
  std::string schedule;               ///< a schedule file to run instead of planning one
  bool pytorch_legacy_names = false;  ///< the CSV names actions as PyTorch before 2.5 did
  std::vector<std::string> overrides;
  std::vector<std::string> simgrid_cfg;
  bool no_plot = false;
  bool bench = false;
  bool quiet = false;
  bool no_fold = false;
  bool force = false;      ///< replace an existing --out folder
  std::string schedulers;  ///< --schedulers: all | a,b,c
};

double peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024.0;
}

struct TimedRun {
  BackendRun run;
  double wall_s = 0;
  /// The schedule's matching, made inside the timed run (the backend's work) and lent on
  /// to the partition views and the trace's link tracks, which would each make it again.
  Matching matching;
};

TimedRun run_backend(const Study& study, const SimOptions& o, const Backend& backend) {
  const auto start = std::chrono::steady_clock::now();
  BackendOptions options;
  options.extra_cfg = o.simgrid_cfg;
  if (!o.quiet) {  // a line every 10 s with an estimate of the time left (quick runs: none)
    options.on_progress = [start,
                           progress = std::make_shared<RunProgress>(backend.label)](double done) {
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (const auto line = progress->update(done, s)) std::cerr << "loom: " << *line << "\n";
    };
  }
  TimedRun timed;
  timed.matching = match_operations(study.schedule);
  options.matching = &timed.matching;
  timed.run = backend.run(study.schedule, study.config.cluster, study.config.sim, options);
  timed.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return timed;
}

/// The rank whose work print_stages shows for `stage`: the first rank of replica 0 that
/// computes it, else the first rank that does (-1: none). Ranks are laid out differently
/// by each scheduler (hetero-*: one rank per GPU or per module stage, cornstarch: encoder
/// ranks first), so the stage comes from the Compute ops, not from the rank index.
std::optional<RankId> stage_rank(const Schedule& s, StageId stage) {
  std::optional<RankId> any;
  for (const RankId r : s.rank_ids()) {
    for (const Op& op : s.programs[r]) {
      const auto* c = std::get_if<Compute>(&op);
      if (!c || c->stage != stage) continue;
      if (s.ranks[r].replica == ReplicaId{0}) return r;
      if (!any) any = r;
      break;
    }
  }
  return any;
}

/// The smallest microbatch `program` computes for `stage` (stage_rank() found one).
MicrobatchId first_microbatch(const std::vector<Op>& program, StageId stage) {
  std::optional<MicrobatchId> first;
  for (const Op& op : program) {
    const auto* c = std::get_if<Compute>(&op);
    if (c && c->stage == stage && (!first || c->microbatch < *first)) first = c->microbatch;
  }
  return first.value();
}

/// What one stage computes for one microbatch: its layer ranges in program order
/// (contiguous ranges of a module merged: hetero-colocated computes layer by layer
/// between CP all-gathers) and per module the F and B seconds and the B's weight part.
struct StageSummary {
  std::vector<std::tuple<std::string, int, int>> ranges;        // module, [first, end)
  std::map<std::string, std::pair<double, double>> per_module;  // F, B
  std::map<std::string, double> weight;
};

StageSummary summarize_stage(const Schedule& s, const std::vector<Op>& program, StageId stage,
                             MicrobatchId microbatch) {
  StageSummary out;
  for (const Op& op : program) {
    const auto* c = std::get_if<Compute>(&op);
    if (!c || c->stage != stage || c->microbatch != microbatch) continue;
    const std::string& name = s.module_names[c->module];
    if (c->pass != Pass::kF) {
      out.per_module[name].second += c->seconds;
      out.weight[name] += c->weight_grad_s;
      continue;
    }
    out.per_module[name].first += c->seconds;
    if (c->continues) continue;  // a layer split around its CP exchange: its last part
    if (!out.ranges.empty() && std::get<0>(out.ranges.back()) == name &&
        std::get<2>(out.ranges.back()) == c->first_layer)
      std::get<2>(out.ranges.back()) = c->end_layer;
    else
      out.ranges.emplace_back(name, c->first_layer, c->end_layer);
  }
  return out;
}

/// Per stage: its layers by module, and the F and B time of the first microbatch (in IR
/// numbering; microbatch 0 for a single-layout pipeline) that stage_rank() computes for it.
void print_stages(const Study& study, std::ostream& os) {
  const Schedule& s = study.schedule;
  for (const StageId stage : IdRange<StageId>(s.num_stages)) {
    const std::optional<RankId> rank = stage_rank(s, stage);
    if (!rank) {
      os << "  stage " << stage << ": (no compute)\n";
      continue;
    }
    const auto& program = s.programs[*rank];
    const StageSummary sum = summarize_stage(s, program, stage, first_microbatch(program, stage));
    os << "  stage " << stage << ":";
    for (const auto& [name, first, end] : sum.ranges)
      os << " " << name << "[" << first << "," << end << ")";
    os << "\n";
    for (const auto& [name, fb] : sum.per_module) {
      os << "    " << name << ": F " << ms(fb.first) << ", B " << ms(fb.second);
      // Say why a backward is missing or partial only when frozen status is the reason
      // (a trainable module can also cost 0 in a table).
      const Module& mod = study.config.model.module(study.config.model.module_index(name).value());
      const bool all_frozen = std::all_of(mod.layers.begin(), mod.layers.end(),
                                          [](const LayerSpec& l) { return l.frozen; });
      if (fb.second == 0 && all_frozen)
        os << " (no backward: frozen, nothing trainable upstream)";
      else if (fb.second > 0 && sum.weight.at(name) == 0 && all_frozen)
        os << " (input gradients only: frozen)";
      os << "\n";
    }
  }
}

/// `--schedulers`: every listed scheduler on the config, one table; with --out also
/// schedulers.csv and the bar chart schedulers.png.
int run_schedulers(const SimOptions& o, const std::vector<std::string>& overrides) {
  if (!o.simgrid_cfg.empty() || o.bench)
    throw InputError("--schedulers: --simgrid-cfg and --bench apply to one scheduler only");
  const Config config = load_study_config(o.config, overrides);  // bad keys: exit 2 before any run
  const std::vector<std::string> names = sweep::scheduler_list(o.schedulers);
  if (!o.quiet)
    std::cerr << "loom: running " << names.size() << " schedulers on " << o.config << " with the "
              << config.sim.backend << " backend ...\n";
  // Staged before the run: each scheduler's process writes its timeline into it.
  std::unique_ptr<OutputDir> out;
  if (!o.out.empty()) {
    out = std::make_unique<OutputDir>(o.out, o.force);
    std::filesystem::create_directories(out->file("timelines"));
  }
  const auto rows = sweep::run_schedulers(o.config, overrides, names, sweep::core_count(),
                                          find_backend(config.sim.backend).once_per_process,
                                          out ? out->file("timelines") : "");
  std::cout << layout_summary(config) << ", " << config.schedule.microbatches << " microbatches of "
            << config.schedule.microbatch_size << ", backend " << config.sim.backend << "\n";
  sweep::print_scheduler_table(rows, std::cout);
  if (rows.size() < names.size()) {
    std::cerr << "loom: interrupted\n";
    return 130;
  }
  if (!out) return 0;
  std::ofstream(out->file("schedulers.csv")) << sweep::scheduler_csv(rows);
  if (!o.no_plot) {
    run_analysis_script("sweep_plot.py",
                        {out->file("schedulers.csv"), "--x", "scheduler", "--y", "iteration_time_s",
                         "--out", out->file("schedulers.png")});
    run_analysis_script("schedulers_gantt.py", {out->file("")});
  }
  out->commit();
  std::cout << "wrote " << out->destination().string()
            << "/{schedulers.csv, timelines/<scheduler>.csv"
            << (o.no_plot ? "" : ", schedulers.png, schedulers_gantt.png") << "}\n";
  return 0;
}

int run_sim(const SimOptions& o) {
  std::vector<std::string> overrides = o.overrides;
  if (!o.backend.empty()) overrides.push_back("sim.backend=" + o.backend);
  if (o.no_fold) overrides.push_back("sim.fold=false");
  if (!o.schedulers.empty()) return run_schedulers(o, overrides);
  if (!o.quiet)
    std::cerr << "loom: " << (o.schedule.empty() ? "planning " + o.config : "loading " + o.schedule)
              << " ...\n";
  const auto plan_start = std::chrono::steady_clock::now();
  auto study =
      load_study(o.config, overrides, o.schedule.empty() ? Folding::kAllowed : Folding::kOff);
  // The partition view other than the study's own is planned on a second core meanwhile
  // (seconds at scale; --bench measures the run alone).
  std::optional<PartitionViews> view_times;
  if (!o.bench) view_times.emplace(*study, !o.schedule.empty());
  if (o.schedule.empty()) {
    plan_study(*study);
  } else {
    study->schedule = load_schedule_file(
        *study, o.schedule,
        o.pytorch_legacy_names ? PytorchNaming::kLegacy : PytorchNaming::kCurrent);
  }
  const double planning_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - plan_start).count();
  const Backend& sim_backend = find_backend(study->config.sim.backend);
  const std::string& backend = sim_backend.name;
  // Staged before the run: a refused --out fails now, and an interrupt removes the staging.
  std::optional<OutputDir> out;
  if (!o.bench) {
    out.emplace(o.out.empty() ? "out/" + std::filesystem::path(o.config).stem().string() : o.out,
                o.force);
  }
  if (!o.quiet) {
    std::cerr << "loom: running " << study->schedule.num_ops() << " operations on "
              << study->schedule.num_ranks() << " ranks with " << sim_backend.label << " ...\n";
    if (!study->fold.describe().empty()) std::cerr << "loom: " << study->fold.describe() << "\n";
  }
  if (const std::string note = unapplied_options(*study); !note.empty())
    std::cerr << "loom: warning: " << note << "\n";
  TimedRun timed = run_backend(*study, o, sim_backend);
  if (o.bench && !sim_backend.once_per_process) {
    // A backend that can run again (the evaluator) is fast enough for timer noise to
    // matter: report the best of 5, of runs under half a second (a longer one is not
    // noise-bound, and repeating it would only inflate the process's end-to-end time).
    // (SimGrid can run once per process.)
    for (int repeat = 1; repeat < 5 && timed.wall_s < 0.5; ++repeat)
      timed.wall_s = std::min(timed.wall_s, run_backend(*study, o, sim_backend).wall_s);
  }
  const BackendRun& run = timed.run;
  if (o.bench) {
    nlohmann::json bench = {{"backend", backend},
                            {"config", o.config},
                            {"ranks", study->schedule.num_ranks()},
                            {"gpus", study->schedule.num_ranks() * study->config.parallel.tp *
                                         study->schedule.replica_fold},
                            {"simulated_replicas", study->fold.simulated},
                            {"replicas", study->fold.total},
                            {"operations", study->schedule.num_ops()},
                            {"activities", run.activities},
                            {"planning_s", planning_s},
                            {"wall_s", timed.wall_s},
                            {"activities_per_s", run.activities / std::max(timed.wall_s, 1e-9)},
                            {"peak_rss_bytes", peak_rss_bytes()},
                            {"iteration_time_s", run.timeline.iteration_time_s()}};
    std::cout << bench.dump() << "\n";
    return 0;
  }
  if (!o.quiet && study->schedule.num_ops() >= 1000000)  // seconds of writing at this size
    std::cerr << "loom: writing " << out->destination().string() << " ...\n";
  // The views the study's own plan answers need nothing from the run: on a second core
  // while the timeline files are written. (Not during the run: SimGrid's is bound by memory
  // latency, and a second thread beside it slowed it by half at 16,384 GPUs.)
  const Matching* matching = &timed.matching;
  auto views_run =
      std::async(std::launch::async, [&] { return view_times->get(*study, matching); });
  write_timeline_files(*out, *study, run.timeline, matching);
  const SimReport report = sim_report(*study, run.timeline, backend, views_run.get());
  const Metrics& metrics = report.metrics;
  const nlohmann::json& views = report.views;
  const nlohmann::json& metrics_file = report.file;
  write_metrics_and_plots(*out, metrics_file, !o.no_plot);
  out->commit();

  std::ostream& os = std::cout;
  const Config& c = study->config;
  os << "scheduler " << study->schedule.scheduler << ", " << layout_summary(c) << ", "
     << c.schedule.microbatches << " microbatches of " << c.schedule.microbatch_size << ", backend "
     << backend << "\n";
  if (!study->fold.describe().empty()) os << "replicas         " << study->fold.describe() << "\n";
  if (const std::string where = placement_summary(*study); !where.empty())
    os << "placement        " << where << "\n";
  print_stages(*study, os);
  os << "iteration time   " << ms(metrics.iteration_time_s) << "\n";
  os << "throughput       " << metrics.throughput_samples_per_s << " samples/s\n";
  print_rates(report.rates, c.cluster.gpu.peak_flops, os);
  os << "bubble fraction  " << metrics.bubble_fraction << "\n";
  if (const std::string links = busiest_links_summary(metrics_file); !links.empty())
    os << "busiest links    " << links << "\n";
  double peak = 0;
  for (const RankMetrics& r : metrics.per_rank) peak = std::max(peak, r.peak_memory_bytes);
  char memory[96];
  std::snprintf(memory, sizeof memory, "%.2f GiB (of %.2f GiB per GPU)", peak / (1 << 30),
                c.cluster.gpu.memory_bytes / (1 << 30));
  os << "peak memory      " << memory << "\n";
  if (!views.is_null()) {
    const double t = views["true"], n = views["naive"];
    os << "partition views  frozen-aware (true) " << ms(t) << ", naive " << ms(n)
       << " (evaluator): ";
    os << (t < n
               ? "frozen-aware is faster by " + std::to_string((n / t - 1) * 100).substr(0, 5) + "%"
           : t == n ? std::string("no difference")
                    : "naive is faster")
       << "\n";
  }
  os << "wrote " << out->destination().string()
     << "/{metrics.json, timeline.json (open in ui.perfetto.dev), "
     << "timeline.csv, memory.csv, schedule.txt" << (o.no_plot ? "" : ", gantt.png, memory.png")
     << "}\n";
  return 0;
}

}  // namespace

CommandRun attach_sim(CLI::App& sub) {
  auto o = std::make_shared<SimOptions>();
  sub.add_option("CONFIG", o->config, "TOML config (see configs/examples/)")
      ->required()
      ->check(CLI::ExistingFile);
  sub.add_option("--out", o->out,
                 "Output directory, replaced as a whole (default: out/<config name>)");
  sub.add_option("--backend", o->backend, backend_help() + " (default: the config's sim.backend)")
      ->check(CLI::IsMember(backend_names()));
  sub.add_option("--schedule", o->schedule,
                 "Run this schedule instead of planning one: a file in the `loom` format or "
                 "PyTorch's action CSV (detected from the content), or a folder of Chakra "
                 "traces (loom schedule export --format chakra; docs/schedule-ir.md)")
      ->check(CLI::ExistingPath);
  sub.add_flag("--pytorch-legacy-names", o->pytorch_legacy_names,
               "--schedule is a PyTorch CSV from before 2.5: B is the input-gradient backward "
               "where the file has W actions (else the full one), BW the full backward")
      ->needs("--schedule");
  sub.add_option("--set", o->overrides,
                 "Override a config key: section.key=value (repeatable), "
                 "e.g. --set parallel.pp=8 --set schedule.name=gpipe");
  sub.add_option("--simgrid-cfg", o->simgrid_cfg,
                 "Pass a SimGrid setting KEY:VALUE (repeatable), e.g. network/TCP-gamma:4194304");
  sub.add_flag("--no-plot", o->no_plot, "Skip the Gantt and memory PNGs");
  sub.add_flag("--force", o->force, "Replace --out if it holds the output of an earlier run");
  sub.add_flag("--bench", o->bench,
               "Time the backend only: print wall time, peak RSS and activities/s as JSON");
  sub.add_flag("--quiet,-q", o->quiet, "No progress messages on stderr");
  sub.add_flag("--no-fold", o->no_fold,
               "Simulate every data-parallel replica op by op, even identical ones (by "
               "default a symmetric job simulates two blocks of replicas; same as --set "
               "sim.fold=false)");
  sub.add_option("--schedulers", o->schedulers,
                 "Run every scheduler listed (all, or a,b,c) on the config: one table, and "
                 "schedulers.csv + schedulers.png in --out; those that do not apply say why. An "
                 "entry may set its scheduler's options: 'interleaved-1f1b:chunks=2,1f1b,zb-v' "
                 "(`loom schedulers NAME` lists them)");
  return [o]() { return run_sim(*o); };
}

}  // namespace loom
