// `loom validate DIR`: every config in DIR that names a published run ([validation]) is
// planned and run on the evaluator and SimGrid; prints predicted vs measured seconds per
// iteration, the signed error per run, and the mean and max absolute error per backend;
// beside the seconds, model TFLOP/s per GPU measured and predicted (core/model_flops.hpp:
// one count of the model's FLOPs, divided by each time). A published run Loom calls
// infeasible (it does not fit the GPUs as the config states it) is listed with the reason
// and left out of the means: a miss of its own kind, never a silent one.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "app/backends.hpp"
#include "app/study.hpp"
#include "app/study_run.hpp"
#include "cli/commands.hpp"
#include "cli/run_output.hpp"
#include "core/config.hpp"
#include "core/errors.hpp"
#include "core/index.hpp"

namespace loom {
namespace {

struct Options {
  std::string dir;
  std::string backend = "both";
  std::vector<std::string> overrides;
  std::string png;
  bool json = false;
  bool quiet = false;
};

struct Run {
  std::string name;
  std::string path;
  std::string source;
  int gpus = 0;
  std::string layout;
  double measured_s = 0;
  std::map<std::string, double> predicted_s;  ///< by backend
  double model_flops = 0;                     ///< per iteration, Megatron's rule
  std::string infeasible;                     ///< why Loom cannot run it; empty: it can
  /// Model TFLOP/s per GPU at `seconds` per iteration.
  double tflops(double seconds) const { return model_flops / seconds / gpus / 1e12; }
};

std::vector<Run> find_runs(const Options& o) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(o.dir))
    throw InputError(o.dir +
                     ": not a folder (give a folder of validation configs, e.g. "
                     "validation/megatron-narayanan-2021)");
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(o.dir)) {
    if (entry.path().extension() == ".toml") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<Run> runs;
  for (const fs::path& file : files) {
    const Config c = load_study_config(file.string(), o.overrides);
    if (c.validation.measured_iteration_s <= 0) continue;
    Run r;
    r.name = file.stem().string();
    r.path = file.string();
    r.source = c.validation.source;
    r.layout = "TP" + std::to_string(c.parallel.tp) + " PP" + std::to_string(c.parallel.pp) +
               (c.parallel.cp > 1 ? " CP" + std::to_string(c.parallel.cp) : "") + " DP" +
               std::to_string(c.parallel.dp) +
               (c.parallel.ep > 1 ? " EP" + std::to_string(c.parallel.ep) : "");
    r.measured_s = c.validation.measured_iteration_s;
    r.gpus = c.cluster.num_gpus();
    try {
      const auto study = prepare_study(r.path, o.overrides, Folding::kAllowed);
      const TrainingRates rates = study_rates(*study, r.measured_s);
      r.model_flops = rates.model_flops;
      r.gpus = rates.gpus;
    } catch (const InfeasibleError& e) {
      const std::string what = e.what(), prefix = r.path + ": ";
      r.infeasible = what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what;
    }
    runs.push_back(r);
  }
  if (runs.empty())
    throw InputError(o.dir + ": no config with a [validation] table (measured_iteration, source)");
  return runs;
}

double error_pct(const Run& r, const std::string& backend) {
  return 100.0 * (r.predicted_s.at(backend) - r.measured_s) / r.measured_s;
}

/// Mean and max |error| over the runs Loom could run; how many it could not.
nlohmann::json summary(const std::vector<Run>& runs, const std::string& backend) {
  double sum = 0;
  double worst = 0;
  int ran = 0;
  for (const Run& r : runs) {
    if (!r.infeasible.empty()) continue;
    ++ran;
    sum += std::abs(error_pct(r, backend));
    worst = std::max(worst, std::abs(error_pct(r, backend)));
  }
  nlohmann::json j = {{"runs", ran}, {"infeasible_runs", isize(runs) - ran}};
  if (ran > 0) {
    j["mean_abs_error_pct"] = sum / ran;
    j["max_abs_error_pct"] = worst;
  }
  return j;
}

void print_table(const std::vector<Run>& runs, const std::vector<std::string>& backends) {
  std::printf("%-20s %5s  %-20s %10s %8s", "run", "GPUs", "layout", "measured s", "TFLOP/s");
  for (const std::string& b : backends)
    std::printf(" %11s %7s %8s", (b + " s").c_str(), "error", "TFLOP/s");
  std::printf("\n");
  for (const Run& r : runs) {
    if (!r.infeasible.empty()) {
      std::printf("%-20s %5d  %-20s %10.3f %8s  infeasible (below)\n", r.name.c_str(), r.gpus,
                  r.layout.c_str(), r.measured_s, "-");
      continue;
    }
    std::printf("%-20s %5d  %-20s %10.3f %8.1f", r.name.c_str(), r.gpus, r.layout.c_str(),
                r.measured_s, r.tflops(r.measured_s));
    for (const std::string& b : backends) {
      std::printf(" %11.3f %+6.1f%% %8.1f", r.predicted_s.at(b), error_pct(r, b),
                  r.tflops(r.predicted_s.at(b)));
    }
    std::printf("\n");
  }
  std::printf(
      "TFLOP/s: model TFLOP/s per GPU, Megatron's count without recomputation "
      "(docs/cost-model.md, \"Model FLOPs\")\n");
  for (const std::string& b : backends) {
    const nlohmann::json s = summary(runs, b);
    if (s["runs"] == 0) continue;
    std::printf("%s: mean |error| %.1f %%, max |error| %.1f %% over %d runs\n", b.c_str(),
                s["mean_abs_error_pct"].get<double>(), s["max_abs_error_pct"].get<double>(),
                s["runs"].get<int>());
  }
  for (const Run& r : runs) {
    if (!r.infeasible.empty())
      std::printf("%s: infeasible as stated, left out of the means: %s\n", r.name.c_str(),
                  r.infeasible.c_str());
  }
}

void write_png(const Options& o, const std::vector<Run>& runs,
               const std::vector<std::string>& backends) {
  namespace fs = std::filesystem;
  const fs::path png = fs::absolute(o.png);
  const fs::path csv = png.parent_path() / ("." + png.stem().string() + ".csv");
  {
    std::ofstream out(csv);
    out << "run,backend,measured_s,predicted_s\n";
    for (const Run& r : runs)
      for (const std::string& b : backends)
        if (r.infeasible.empty())
          out << r.name << "," << b << "," << r.measured_s << "," << r.predicted_s.at(b) << "\n";
  }
  const bool ok = run_analysis_script("validate_plot.py", {csv.string(), "--out", png.string()});
  fs::remove(csv);
  if (!ok) throw std::runtime_error("validate_plot.py failed; no PNG written");
}

int run_validate(const Options& o) {
  const std::vector<std::string> backends =
      o.backend == "both" ? backend_names() : std::vector<std::string>{o.backend};
  // Checked first: the plot comes after minutes of simulation.
  if (!o.png.empty()) check_png_path(o.png, "validation.png");
  std::vector<Run> runs = find_runs(o);
  for (Run& r : runs) {
    if (!r.infeasible.empty()) continue;
    for (const std::string& b : backends) {
      if (!o.quiet) std::cerr << "loom: " << r.name << " on " << b << " ...\n";
      r.predicted_s[b] = iteration_time(r.path, o.overrides, b);
    }
  }
  if (o.json) {
    nlohmann::json j = {{"folder", o.dir}, {"runs", nlohmann::json::array()}};
    for (const Run& r : runs) {
      nlohmann::json run = {{"run", r.name},
                            {"source", r.source},
                            {"gpus", r.gpus},
                            {"layout", r.layout},
                            {"measured_s", r.measured_s}};
      if (!r.infeasible.empty()) {
        run["infeasible"] = r.infeasible;
        j["runs"].push_back(run);
        continue;
      }
      run["model_flops_per_iteration"] = r.model_flops;
      run["measured_tflops_per_gpu"] = r.tflops(r.measured_s);
      for (const std::string& b : backends) {
        run["predicted_s"][b] = r.predicted_s.at(b);
        run["predicted_tflops_per_gpu"][b] = r.tflops(r.predicted_s.at(b));
        run["error_pct"][b] = error_pct(r, b);
      }
      j["runs"].push_back(run);
    }
    for (const std::string& b : backends) j["summary"][b] = summary(runs, b);
    std::cout << j.dump(2) << "\n";
  } else {
    print_table(runs, backends);
  }
  if (!o.png.empty()) {
    write_png(o, runs, backends);
    if (!o.json) std::cout << "wrote " << o.png << "\n";
  }
  return 0;
}

}  // namespace

CommandRun attach_validate(CLI::App& sub) {
  auto o = std::make_shared<Options>();
  sub.add_option("dir", o->dir,
                 "Folder of validation configs: each names a published run in [validation] "
                 "(measured_iteration, source), e.g. validation/megatron-narayanan-2021")
      ->required();
  std::vector<std::string> choices = backend_names();
  std::string help;  // "evaluator, simgrid or both"
  for (const std::string& n : choices) help += n + ", ";
  help.replace(help.size() - 2, 2, " or both");
  choices.push_back("both");
  sub.add_option("--backend", o->backend, help)
      ->capture_default_str()
      ->check(CLI::IsMember(choices));
  sub.add_option("--set", o->overrides, "Override a key in every config: section.key=value");
  sub.add_flag("--json", o->json, "Print runs and summary as JSON");
  sub.add_option("--png", o->png,
                 "Also draw predicted vs measured (log-log, with the +-10 % band) into this PNG");
  sub.add_flag("--quiet", o->quiet, "No progress lines on stderr");
  return [o] { return run_validate(*o); };
}

}  // namespace loom
