// `loom sim CONFIG`: the default what-if study. Plans the schedule, runs it in a backend,
// writes metrics.json, timeline.json (Perfetto), timeline.csv, memory.csv, schedule.txt
// and the Gantt/memory plots into --out, and prints a summary.
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "cli/commands.hpp"
#include "cli/output_dir.hpp"
#include "cli/study.hpp"
#include "core/evaluator.hpp"
#include "core/io.hpp"
#include "core/timeline.hpp"
#include "core/variability.hpp"
#include "sim/simgrid_backend.hpp"

extern char** environ;

namespace loom {
namespace {

struct SimOptions {
  std::string config;
  std::string out;
  std::string backend;
  std::vector<std::string> overrides;
  std::vector<std::string> simgrid_cfg;
  bool no_plot = false;
  bool bench = false;
  bool quiet = false;
};

std::string ms(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f ms", seconds * 1e3);
  return buf;
}

double peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024.0;
}

struct BackendRun {
  Timeline timeline;
  double wall_s = 0;
  size_t activities = 0;
};

BackendRun run_backend(const Study& study, const SimOptions& o, const std::string& backend) {
  const bool quiet = o.quiet;
  BackendRun run;
  const auto start = std::chrono::steady_clock::now();
  if (backend == "evaluator") {
    run.timeline = evaluate(study.schedule, study.config.cluster);
    run.activities = study.schedule.num_ops();
  } else {
    SimGridOptions options;
    options.network_model = study.config.sim.network_model;
    options.extra_cfg = o.simgrid_cfg;
    if (!quiet && study.schedule.num_ops() >= 100000) {  // seconds of work: say how far
      options.on_progress = [start](double done) {
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        std::fprintf(stderr, "loom: simgrid %3.0f%% of operations done (%.1f s)\n", done * 100, s);
      };
    }
    SimGridStats stats{};
    run.timeline = run_simgrid(study.schedule, study.config.cluster, options, &stats);
    run.activities = stats.activities;
  }
  run.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return run;
}

nlohmann::json metrics_json(const Study& study, const Metrics& m, const std::string& backend,
                            const nlohmann::json& views) {
  nlohmann::json per_rank = nlohmann::json::array();
  for (const RankMetrics& r : m.per_rank) {
    per_rank.push_back({{"rank", r.rank},
                        {"busy_s", r.busy_s},
                        {"peak_memory_bytes", r.peak_memory_bytes},
                        {"peak_live_microbatches", r.peak_live_microbatches}});
  }
  const Config& c = study.config;
  // Table 4.3: per-microbatch forward time of each component, summed over its stages.
  nlohmann::json forward = nlohmann::json::object();
  for (const ComponentForwardStats& f : component_forward_stats(study.schedule, c.model)) {
    forward[f.component] = {
        {"mean_s", f.mean_s}, {"std_s", f.std_s}, {"per_microbatch_s", f.per_microbatch}};
  }
  return {{"iteration_time_s", m.iteration_time_s},
          {"throughput_samples_per_s", m.throughput_samples_per_s},
          {"bubble_fraction", m.bubble_fraction},
          {"per_rank", per_rank},
          {"scheduler", study.schedule.scheduler},
          {"backend", backend},
          {"config", c.path},
          {"gpu_memory_bytes", c.cluster.gpu.memory_bytes},
          {"layout", {{"pp", c.parallel.pp}, {"dp", c.parallel.dp}, {"tp", c.parallel.tp}}},
          {"microbatches", c.schedule.microbatches},
          {"microbatch_size", c.schedule.microbatch_size},
          {"partition_view", c.schedule.partition_view == PartitionView::kTrue ? "true" : "naive"},
          {"partition_views_evaluator_s", views},
          {"cost_model", study.cost->describe()},
          {"component_forward", forward}};
}

/// Per stage: its layers by module, and the F and B time of microbatch 0 (rank of replica 0).
void print_stages(const Study& study, std::ostream& os) {
  const Schedule& s = study.schedule;
  for (int stage = 0; stage < s.num_stages; ++stage) {
    std::map<std::string, std::pair<double, double>> per_module;  // F, B
    std::map<std::string, double> weight;
    std::string layers;
    for (const Op& op : s.programs[static_cast<size_t>(stage)]) {
      const auto* c = std::get_if<Compute>(&op);
      if (!c || c->microbatch != 0) continue;
      const std::string& name = s.module_names[static_cast<size_t>(c->module)];
      if (c->pass == Pass::kF) {
        per_module[name].first += c->seconds;
        layers += (layers.empty() ? "" : " ") + name + "[" + std::to_string(c->first_layer) + "," +
                  std::to_string(c->end_layer) + ")";
      } else {
        per_module[name].second += c->seconds;
        weight[name] += c->weight_grad_s;
      }
    }
    os << "  stage " << stage << ": " << layers << "\n";
    for (const auto& [name, fb] : per_module) {
      os << "    " << name << ": F " << ms(fb.first) << ", B " << ms(fb.second);
      // Say why a backward is missing or partial only when frozen status is the reason
      // (a trainable module can also cost 0 in a table).
      const Module& mod = study.config.model.module(study.config.model.module_index(name));
      const bool all_frozen = std::all_of(mod.layers.begin(), mod.layers.end(),
                                          [](const LayerSpec& l) { return l.frozen; });
      if (fb.second == 0 && all_frozen)
        os << " (no backward: frozen, nothing trainable upstream)";
      else if (fb.second > 0 && weight[name] == 0 && all_frozen)
        os << " (input gradients only: frozen)";
      os << "\n";
    }
  }
}

void run_plots(const std::string& dir) {
  const char* py_env = std::getenv("LOOM_PYTHON");
  const char* analysis_env = std::getenv("LOOM_ANALYSIS_DIR");
  const std::string python = py_env ? py_env : "/usr/bin/python3";
  const std::string script =
      std::string(analysis_env ? analysis_env : LOOM_ANALYSIS_DIR) + "/plot_all.py";
  if (!std::filesystem::exists(script) || !std::filesystem::exists(python)) {
    std::cerr << "loom: warning: plots skipped (" << python << " or " << script << " not found)\n";
    return;
  }
  // Quiet always: the script would name the staging directory; loom names the result.
  std::vector<std::string> args = {python, script, dir, "--quiet"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, python.c_str(), nullptr, nullptr, argv.data(), environ) != 0) {
    std::cerr << "loom: warning: could not start " << python << "; plots skipped\n";
    return;
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::cerr << "loom: warning: plotting failed (needs matplotlib: apt-get install "
                 "python3-matplotlib)\n";
  }
}

void write_schedule_text(const std::string& path, const Schedule& s) {
  std::ofstream out = open_for_write(path);
  out << "# " << s.scheduler << ": one line per rank, operations in execution order\n";
  for (int r = 0; r < s.num_ranks(); ++r) {
    out << "rank " << r << ":";
    for (const Op& op : s.programs[static_cast<size_t>(r)]) out << ' ' << to_string(op, s);
    out << '\n';
  }
  finish_write(out, path);
}

int run_sim(const SimOptions& o) {
  std::vector<std::string> overrides = o.overrides;
  if (!o.backend.empty()) overrides.push_back("sim.backend=" + o.backend);
  if (!o.quiet) std::cerr << "loom: planning " << o.config << " ...\n";
  const auto plan_start = std::chrono::steady_clock::now();
  const auto study = prepare_study(o.config, overrides);
  const double planning_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - plan_start).count();
  const std::string backend = study->config.sim.backend;
  if (!o.quiet) {
    std::cerr << "loom: running " << study->schedule.num_ops() << " operations on "
              << study->schedule.num_ranks() << " ranks with "
              << (backend == "simgrid" ? "SimGrid" : "the evaluator") << " ...\n";
  }
  BackendRun run = run_backend(*study, o, backend);
  if (o.bench && backend == "evaluator") {
    // The evaluator is fast enough for timer noise to matter: report the best of 5.
    // (SimGrid can run once per process.)
    for (int repeat = 1; repeat < 5; ++repeat)
      run.wall_s = std::min(run.wall_s, run_backend(*study, o, backend).wall_s);
  }
  if (o.bench) {
    nlohmann::json bench = {{"backend", backend},
                            {"config", o.config},
                            {"ranks", study->schedule.num_ranks()},
                            {"gpus", study->schedule.num_ranks() * study->config.parallel.tp},
                            {"operations", study->schedule.num_ops()},
                            {"activities", run.activities},
                            {"planning_s", planning_s},
                            {"wall_s", run.wall_s},
                            {"activities_per_s", run.activities / std::max(run.wall_s, 1e-9)},
                            {"peak_rss_bytes", peak_rss_bytes()},
                            {"iteration_time_s", run.timeline.iteration_time_s()}};
    std::cout << bench.dump() << "\n";
    return 0;
  }
  const Metrics metrics = compute_metrics(study->schedule, run.timeline);
  nlohmann::json views = nullptr;
  if (study->config.schedule.stage_layers.empty()) {
    views = {{"true", evaluate_with_view(*study, PartitionView::kTrue)},
             {"naive", evaluate_with_view(*study, PartitionView::kNaive)}};
  }
  const std::string out_dir =
      o.out.empty() ? "out/" + std::filesystem::path(o.config).stem().string() : o.out;
  OutputDir out(out_dir);
  {
    const std::string path = out.file("metrics.json");
    std::ofstream f = open_for_write(path);
    f << metrics_json(*study, metrics, backend, views).dump(2) << "\n";
    finish_write(f, path);
  }
  write_chrome_trace(out.file("timeline.json"), study->schedule, run.timeline);
  write_timeline_csv(out.file("timeline.csv"), study->schedule, run.timeline);
  write_memory_csv(out.file("memory.csv"), memory_over_time(study->schedule, run.timeline));
  write_schedule_text(out.file("schedule.txt"), study->schedule);
  if (!o.no_plot) run_plots(out.file(""));
  out.commit();

  std::ostream& os = std::cout;
  const Config& c = study->config;
  os << "scheduler " << study->schedule.scheduler << ", pp " << c.parallel.pp << " x dp "
     << c.parallel.dp << " x tp " << c.parallel.tp << ", " << c.schedule.microbatches
     << " microbatches of " << c.schedule.microbatch_size << ", backend " << backend << "\n";
  print_stages(*study, os);
  os << "iteration time   " << ms(metrics.iteration_time_s) << "\n";
  os << "throughput       " << metrics.throughput_samples_per_s << " samples/s\n";
  os << "bubble fraction  " << metrics.bubble_fraction << "\n";
  double peak = 0;
  for (const RankMetrics& r : metrics.per_rank) peak = std::max(peak, r.peak_memory_bytes);
  os << "peak memory      " << peak / (1024.0 * 1024 * 1024) << " GiB (of "
     << c.cluster.gpu.memory_bytes / 1e9 << " GB per GPU)\n";
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
  os << "wrote " << out.destination().string()
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
  sub.add_option("--backend", o->backend,
                 "simgrid (link contention, default) or evaluator (contention-free, fast)")
      ->check(CLI::IsMember({"simgrid", "evaluator"}));
  sub.add_option("--set", o->overrides,
                 "Override a config key: section.key=value (repeatable), "
                 "e.g. --set parallel.pp=8 --set schedule.name=gpipe");
  sub.add_option("--simgrid-cfg", o->simgrid_cfg,
                 "Pass a SimGrid setting KEY:VALUE (repeatable), e.g. network/TCP-gamma:4194304");
  sub.add_flag("--no-plot", o->no_plot, "Skip the Gantt and memory PNGs");
  sub.add_flag("--bench", o->bench,
               "Time the backend only: print wall time, peak RSS and activities/s as JSON");
  sub.add_flag("--quiet,-q", o->quiet, "No progress messages on stderr");
  return [o]() { return run_sim(*o); };
}

}  // namespace loom
