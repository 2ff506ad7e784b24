#include "cli/run_output.hpp"

#include <malloc.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iostream>
#include <optional>

#include "core/errors.hpp"
#include "core/io.hpp"
#include "core/layout.hpp"
#include "core/link_load.hpp"
#include "core/placement.hpp"
#include "core/variability.hpp"

extern char** environ;

namespace loom {
namespace {

void write_schedule_text(const std::string& path, const Schedule& s) {
  std::ofstream out = open_for_write(path);
  out << "# " << s.scheduler << ": one line per rank, operations in execution order\n";
  for (const RankId r : s.rank_ids()) {
    out << "rank " << r << ":";
    for (const Op& op : s.programs[r]) out << ' ' << to_string(op, s);
    out << '\n';
  }
  finish_write(out, path);
}

/// The reach of each dimension of the single layout, as the study placed it.
std::optional<std::vector<DimensionReach>> study_reach(const Study& study) {
  const ParallelConfig& p = study.config.parallel;
  if (!p.module_layouts.empty()) return std::nullopt;
  // The schedule's own replicas: an imported schedule may hold fewer than parallel.dp.
  int replicas = 1;
  for (const RankInfo& info : study.schedule.ranks)
    replicas = std::max(replicas, info.replica.value() + 1);
  const int ranks = study.schedule.num_ranks() / std::max(1, replicas * p.cp);
  return dimension_reach(p, ranks, study.config.cluster);
}

}  // namespace

std::string placement_summary(const Study& study) {
  std::string out;
  for (const DimensionReach& d : study_reach(study).value_or(std::vector<DimensionReach>{})) {
    out += (out.empty() ? "" : ", ") + std::string(d.dimension) + " " + std::to_string(d.degree) +
           " " + describe(d.reach, study.config.cluster);
  }
  return out;
}

std::string busiest_links_summary(const nlohmann::json& metrics) {
  std::string out;
  for (const nlohmann::json& t : metrics.value("links", nlohmann::json::array())) {
    char line[160];
    std::snprintf(line, sizeof line, "%s%s %s %.1f %%", out.empty() ? "" : ", ",
                  t.at("tier").get<std::string>().c_str(),
                  t.at("busiest").get<std::string>().c_str(),
                  100 * t.at("busiest_utilisation").get<double>());
    out += line;
  }
  return out;
}

std::string ms(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f ms", seconds * 1e3);
  return buf;
}

void print_rates(const TrainingRates& rates, double peak_flops, std::ostream& os) {
  char line[200];
  std::snprintf(line, sizeof line,
                "model FLOPs      %.1f TFLOP/s per GPU, MFU %.1f %% of %.0f TFLOP/s, %.0f tokens/s "
                "per GPU (%d GPUs)\n",
                rates.tflops_per_gpu, 100 * rates.mfu, peak_flops / 1e12,
                rates.tokens_per_s_per_gpu, rates.gpus);
  os << line;
}

nlohmann::json metrics_json(const Study& study, const Metrics& m, const TrainingRates& rates,
                            const std::string& backend, const nlohmann::json& extra) {
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
  nlohmann::json j = {
      {"iteration_time_s", m.iteration_time_s},
      {"throughput_samples_per_s", m.throughput_samples_per_s},
      // Model FLOPs under Megatron's rule (core/model_flops.hpp, docs/cost-model.md).
      {"model_flops_per_iteration", rates.model_flops},
      {"tflops_per_gpu", rates.tflops_per_gpu},
      {"mfu", rates.mfu},
      {"tokens_per_s_per_gpu", rates.tokens_per_s_per_gpu},
      {"gpus", rates.gpus},
      {"bubble_fraction", m.bubble_fraction},
      {"per_rank", per_rank},
      {"scheduler", study.schedule.scheduler},
      {"backend", backend},
      {"config", c.path},
      {"gpu_memory_bytes", c.cluster.gpu.memory_bytes},
      {"layout", {{"pp", c.parallel.pp}, {"dp", c.parallel.dp}, {"tp", c.parallel.tp}}},
      // per_rank lists the simulated replicas' ranks; the others are identical to them.
      {"replicas",
       {{"total", study.fold.total},
        {"simulated", study.fold.simulated},
        {"note", study.fold.describe()}}},
      {"microbatches", c.schedule.microbatches},
      {"microbatch_size", c.schedule.microbatch_size},
      {"partition_view", c.schedule.partition_view == PartitionView::kTrue ? "true" : "naive"},
      {"cost_model", study.cost->describe()},
      {"component_forward", forward}};
  if (c.parallel.fsdp) j["layout"]["fsdp"] = true;  // absent otherwise: older files unchanged
  if (c.parallel.cp > 1) {
    j["layout"]["cp"] = c.parallel.cp;
    j["layout"]["cp_comm"] = to_string(c.parallel.cp_comm);
  }
  if (c.parallel.ep > 1) {
    // The router's loads as the lowering drew them (core/routing.hpp): the busiest EP rank's
    // share x ep (1 = balanced) and the token copies a capacity factor dropped.
    j["layout"]["ep"] = c.parallel.ep;
    const int groups = study.schedule.num_ranks() / study.schedule.num_stages / c.parallel.ep;
    const RoutingSummary r =
        summarize_routing(c.model, c.schedule.microbatches, groups, c.parallel.ep);
    nlohmann::json routing = nlohmann::json::object();
    for (const Module& module : c.model.modules()) {
      for (const LayerSpec& l : module.layers) {
        if (l.moe()) routing[module.name] = module.routing.text();
      }
    }
    j["moe"] = {{"routing", routing},
                {"busiest_rank_factor_mean", r.mean_busiest_factor},
                {"busiest_rank_factor_max", r.max_busiest_factor},
                {"dropped_token_fraction", r.dropped}};
  }
  if (const auto reach = study_reach(study)) {
    nlohmann::json placement = nlohmann::json::array();
    for (const DimensionReach& d : *reach) {
      placement.push_back({{"dimension", d.dimension},
                           {"degree", d.degree},
                           {"reach", describe(d.reach, c.cluster)}});
    }
    j["placement"] = placement;
  }
  // Per tier of the platform: what its links carried (the simulated replicas' traffic).
  nlohmann::json links = nlohmann::json::array();
  for (const TierLoad& t : tier_loads(study.schedule, c.cluster, m.iteration_time_s)) {
    links.push_back({{"tier", to_string(t.tier)},
                     {"loaded_link_directions", t.loaded},
                     {"bytes", t.bytes},
                     {"mean_utilisation", t.mean_utilisation},
                     {"busiest", t.busiest},
                     {"busiest_bytes", t.busiest_bytes},
                     {"busiest_utilisation", t.busiest_utilisation}});
  }
  j["links"] = links;
  j["fabric"] = to_string(c.cluster.fabric.kind);
  for (const auto& [key, value] : extra.items()) j[key] = value;
  return j;
}

void keep_freed_memory() {
  constexpr int kOneGiB = 1 << 30;
  mallopt(M_MMAP_THRESHOLD, kOneGiB);
  mallopt(M_TRIM_THRESHOLD, kOneGiB);
}

bool run_analysis_script(const std::string& script_name, const std::vector<std::string>& args) {
  const char* py_env = std::getenv("LOOM_PYTHON");
  const char* analysis_env = std::getenv("LOOM_ANALYSIS_DIR");
  const std::string python = py_env ? py_env : "/usr/bin/python3";
  const std::string script =
      std::string(analysis_env ? analysis_env : LOOM_ANALYSIS_DIR) + "/" + script_name;
  if (!std::filesystem::exists(script) || !std::filesystem::exists(python)) {
    std::cerr << "loom: warning: plots skipped (" << python << " or " << script << " not found)\n";
    return false;
  }
  std::vector<std::string> argv_s = {python, script};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, python.c_str(), nullptr, nullptr, argv.data(), environ) != 0) {
    std::cerr << "loom: warning: could not start " << python << "; plots skipped\n";
    return false;
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::cerr << "loom: warning: plotting failed (needs matplotlib: apt-get install "
                 "python3-matplotlib)\n";
    return false;
  }
  return true;
}

PartitionViews::PartitionViews(const Study& study, bool schedule_from_file)
    : skipped_(!study.config.schedule.stage_layers.empty() || schedule_from_file),
      assumed_fold_(study.fold.factor()) {
  if (skipped_) return;
  for (const PartitionView view : {PartitionView::kTrue, PartitionView::kNaive}) {
    if (!view_needs_replanning(study.config, view)) continue;
    // The config is read only, by both threads; the problem is copied.
    replanned_[view] = std::async(std::launch::async, evaluate_replanned, std::cref(study.config),
                                  study.problem, view, assumed_fold_);
  }
}

nlohmann::json PartitionViews::get(const Study& study, const Matching* matching) {
  if (skipped_) return nullptr;
  auto time_under = [&](PartitionView view) {
    const auto replanned = replanned_.find(view);
    if (replanned == replanned_.end()) return evaluate_with_view(study, view, matching);
    const double s = replanned->second.get();
    // A plan whose replicas differ is planned whole (prepare_study): so is the view.
    return study.schedule.replica_fold == assumed_fold_ ? s : evaluate_with_view(study, view);
  };
  return {{"true", time_under(PartitionView::kTrue)}, {"naive", time_under(PartitionView::kNaive)}};
}

nlohmann::json partition_views(const Study& study, bool schedule_from_file) {
  return PartitionViews(study, schedule_from_file).get(study);
}

SimReport sim_report(const Study& study, const Timeline& timeline, const std::string& backend,
                     nlohmann::json views) {
  SimReport r;
  r.metrics = study_metrics(study, timeline);
  r.rates = study_rates(study, r.metrics.iteration_time_s);
  r.views = std::move(views);
  r.file =
      metrics_json(study, r.metrics, r.rates, backend, {{"partition_views_evaluator_s", r.views}});
  return r;
}

void write_timeline_files(const OutputDir& out, const Study& study, const Timeline& timeline,
                          const Matching* matching) {
  // The trace is most of the bytes (2 GB at 16,384 GPUs unfolded): format it on a second
  // core while this one writes the other files. Both only read the study and the timeline.
  auto trace = std::async(std::launch::async, [&] {
    write_chrome_trace(
        out.file("timeline.json"), study.schedule, timeline,
        busiest_link_tracks(study.schedule, study.config.cluster, timeline, matching),
        "network: busiest link of each tier");
  });
  write_timeline_csv(out.file("timeline.csv"), study.schedule, timeline);
  write_memory_csv(out.file("memory.csv"), memory_over_time(study.schedule, timeline));
  write_schedule_text(out.file("schedule.txt"), study.schedule);
  trace.get();  // rethrows the trace writer's error, if any
}

void write_metrics_and_plots(const OutputDir& out, const nlohmann::json& metrics, bool plot) {
  const std::string path = out.file("metrics.json");
  std::ofstream f = open_for_write(path);
  f << metrics.dump(2) << "\n";
  finish_write(f, path);
  // Quiet always: the script would name the staging directory; loom names the result.
  if (plot) run_analysis_script("plot_all.py", {out.file(""), "--quiet"});
}

void write_run_files(const OutputDir& out, const Study& study, const Timeline& timeline,
                     const nlohmann::json& metrics, bool plot) {
  write_timeline_files(out, study, timeline);
  write_metrics_and_plots(out, metrics, plot);
}

void check_png_path(const std::string& png, const std::string& example_name) {
  const std::filesystem::path folder = std::filesystem::absolute(png).parent_path();
  if (!std::filesystem::is_directory(folder))
    throw InputError("--png " + png + ": the folder " + folder.string() +
                     " does not exist (create it, or choose another --png)");
  if (std::filesystem::is_directory(png))
    throw InputError("--png " + png + ": is a folder; give a file name such as " +
                     (std::filesystem::path(png) / example_name).string());
}

std::string layout_summary(const Config& c) {
  const ParallelConfig& p = c.parallel;
  if (p.module_layouts.empty()) {
    return "pp " + std::to_string(p.pp) + " x dp " + std::to_string(p.dp) +
           (p.fsdp ? " (FSDP)" : "") +
           (p.cp > 1 ? " x cp " + std::to_string(p.cp) + " (" + to_string(p.cp_comm) + ")" : "") +
           " x tp " + std::to_string(p.tp);
  }
  std::string out;
  for (const LayoutGroup& g : layout_groups(c.model, p.module_layouts)) {
    const ModuleLayout& l = g.layout;
    out += (out.empty() ? "" : ", ") + c.model.module(g.owner).name + " tp " +
           std::to_string(l.tp) + " cp " + std::to_string(l.cp) +
           (l.cp > 1 && l.cp_replicates ? " (replicated)" : "") + " pp " + std::to_string(l.pp) +
           " dp " + std::to_string(l.dp) + " on GPUs " + std::to_string(l.first_gpu) + "-" +
           std::to_string(l.end_gpu() - 1);
  }
  return out;
}

}  // namespace loom
