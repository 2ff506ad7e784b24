// loom plan layout: Entrain's macroscopic profiling (dissertation §4.4.2, Alg 2, printed
// like Table 4.2) and configuration search (§4.4.3, Alg 3), next to the configurations
// the DistTrain-like (1 profiled sample) and DIP-like (1 profiled microbatch) planners
// derive (Table 4.1).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include "app/study.hpp"
#include "cli/checks.hpp"
#include "cli/commands.hpp"
#include "cli/staging.hpp"
#include "core/config.hpp"
#include "core/errors.hpp"
#include "core/io.hpp"
#include "core/workload_gen.hpp"
#include "schedulers/planners/layout/entrain_planner.hpp"
#include "schedulers/variability/dip.hpp"

namespace loom {
namespace {

constexpr int kEvaluationSamples = 4096;  // the "dataset" every plan is rated on

struct Options {
  std::string config;
  std::vector<std::string> overrides;
  std::vector<int> sizes = {1, 4, 16, 64, 256};  // Table 4.2's rows
  double confidence = 0.95;                      // 1 - alpha (§4.7.3: 95%)
  double p_error = 0.05;                         // §4.7.3: 5% -> k = 59
  int n0 = 1;
  int max_batch = 4096;
  bool search_tp = false;
  bool json = false;
  std::string out;  ///< where to write Entrain's layout as a config `loom sim` runs
};

BatchSource make_source(const Config& c) {
  const auto seed = static_cast<std::uint64_t>(c.workload.seed);
  // Profiling draws start far from the ids training iterations use (offset + i).
  constexpr int kProfilingIds = 1 << 28;
  if (!c.workload.dataset.empty())
    return generator_stream(find_dataset(c.workload.dataset, c.workload.images_per_sample), seed,
                            kProfilingIds, c.workload.image_tokens);
  if (!c.workload.csv.empty())
    return pool_stream(load_samples_csv(c.workload.csv, c.workload.image_tokens), seed);
  return pool_stream(synthetic_samples(1, c.workload.tokens), seed);
}

std::string ms(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", s * 1e3);
  return buf;
}

void print_trials(const std::vector<Component>& comps, const std::vector<BernoulliTrial>& trials,
                  int k) {
  std::printf("\nBernoulli trials (Alg 2; k = %d validation batches each), like Table 4.2\n", k);
  std::printf("%10s  %-5s  %-28s  %s\n", "batch size", "pass", "allocations shown (GPUs)",
              "workload ratio range");
  for (const BernoulliTrial& t : trials) {
    std::string shown;
    for (const auto& a : t.allocations) shown += (shown.empty() ? "" : ", ") + allocation_text(a);
    std::printf("%10d  %-5s  %-28s  %.3f - %.3f\n", t.batch_size, t.pass ? "yes" : "no",
                shown.c_str(), t.min_ratio, t.max_ratio);
  }
  std::string names;
  for (const Component& c : comps) names += (names.empty() ? "" : ":") + c.name;
  std::printf("(allocations and ratios are %s)\n", names.c_str());
}

void print_plan(const char* planner, const ConfigSearch& s, const ParallelPlan& p) {
  std::string layout;
  for (const ComponentConfig& c : p.components) {
    layout += c.name + " TP" + std::to_string(c.tp) + " x PP" + std::to_string(c.pp) +
              (p.colocated ? "*" : "") + "  ";
  }
  std::printf("%-10s %8d  %-10s %-34s %9s %9s %10.2f %s\n", planner, s.profiling_size,
              p.colocated ? "colocated" : allocation_text(s.allocation).c_str(), layout.c_str(),
              ms(p.beta_max).c_str(), ms(p.iteration_s).c_str(), p.throughput_samples_per_s,
              p.fits_memory ? "fits" : "OOM");
}

/// A stage's layers as global [first, end): its own range indexes the component's layers.
StageRange global_layers(const Component& comp, StageRange stage) {
  const auto first = std::next(comp.layers.begin(), stage.first);
  const auto last = std::next(comp.layers.begin(), stage.end - 1);
  return {*first, *last + 1};
}

void print_stages(const Model& model, const ParallelPlan& p) {
  const std::vector<Component> comps = model_components(model);
  std::printf("\nChosen layout (entrain), per replica; stages as [first, end) global layers:\n");
  for (size_t i = 0; i < p.components.size(); ++i) {
    const ComponentConfig& c = p.components[i];
    std::printf("  %s: %d GPUs = TP %d x PP %d, beta %s ms\n", c.name.c_str(), c.gpus, c.tp, c.pp,
                ms(c.beta).c_str());
    for (size_t s = 0; s < c.stages.size(); ++s) {
      const StageRange layers = global_layers(comps[i], c.stages[s]);
      std::printf("    stage %zu: [%d,%d)  tau %s ms\n", s, layers.first, layers.end,
                  ms(c.tau[s]).c_str());
    }
  }
}

/// A plan as the config overrides that run it: one `[parallel.modules.<component>]` table
/// per component (its tp, pp, parallel.dp replicas and GPUs of its own, in component
/// order), lowered by cornstarch's per-module graph (modality parallelism; each module's
/// layers cut by Eq 3.5 into its pp stages).
std::vector<std::string> layout_overrides(const ParallelPlan& p, int dp) {
  if (p.colocated)
    throw InputError(
        "--out: the chosen layout colocates every component on every stage; "
        "only disaggregated layouts are written as [parallel.modules] tables");
  std::vector<std::string> sets = {"schedule.name=\"cornstarch\""};
  int next_gpu = 0;
  for (const ComponentConfig& c : p.components) {
    const std::string key = "parallel.modules." + c.name + ".";
    const int gpus = c.tp * c.pp * dp;
    sets.push_back(key + "tp=" + std::to_string(c.tp));
    sets.push_back(key + "pp=" + std::to_string(c.pp));
    sets.push_back(key + "dp=" + std::to_string(dp));
    sets.push_back(key + "gpus=\"" + std::to_string(next_gpu) + "-" +
                   std::to_string(next_gpu + gpus - 1) + "\"");
    next_gpu += gpus;
  }
  return sets;
}

/// Writes `config` with `plan`'s layout to `path` (whole or not at all): a config that
/// `loom sim` reads back.
void write_layout_config(const Options& o, const ParallelPlan& plan, int dp) {
  std::vector<std::string> sets = o.overrides;
  for (std::string& s : layout_overrides(plan, dp)) sets.push_back(std::move(s));
  const Config with_layout = load_study_config(o.config, sets);
  std::string text = "# Entrain's layout from `loom plan layout " + o.config +
                     "` (Alg 3), one [parallel.modules] table per component on GPUs of its "
                     "own, run by cornstarch's per-module lowering\n";
  text += with_layout.resolved_toml;
  StagedFile staged(o.out, "layout.toml");
  std::ofstream out = open_for_write(staged.path());
  out << text;
  finish_write(out, staged.path());
  staged.commit();
  std::fprintf(stderr, "loom plan layout: wrote %s (loom sim reads it)\n",
               staged.destination().string().c_str());
}

nlohmann::json trials_json(const std::vector<BernoulliTrial>& trials) {
  nlohmann::json out = nlohmann::json::array();
  for (const BernoulliTrial& t : trials) {
    out.push_back({{"batch_size", t.batch_size},
                   {"pass", t.pass},
                   {"reference", t.reference},
                   {"allocations", t.allocations},
                   {"min_ratio", t.min_ratio},
                   {"max_ratio", t.max_ratio}});
  }
  return out;
}

/// One planner's row: the same quantities the text table prints, in SI units.
nlohmann::json plan_json(const char* planner, const ConfigSearch& s, const ParallelPlan& p,
                         const Model& model) {
  const std::vector<Component> comps = model_components(model);
  nlohmann::json components = nlohmann::json::array();
  for (size_t i = 0; i < p.components.size(); ++i) {
    const ComponentConfig& c = p.components[i];
    nlohmann::json stages = nlohmann::json::array();
    for (size_t k = 0; k < c.stages.size(); ++k) {
      const StageRange layers = global_layers(comps[i], c.stages[k]);
      stages.push_back(
          {{"first_layer", layers.first}, {"end_layer", layers.end}, {"tau_s", c.tau[k]}});
    }
    components.push_back({{"name", c.name},
                          {"gpus", c.gpus},
                          {"tp", c.tp},
                          {"pp", c.pp},
                          {"beta_s", c.beta},
                          {"peak_memory_bytes", c.peak_memory_bytes},
                          {"stages", stages}});
  }
  return {{"planner", planner},
          {"profiling_size", s.profiling_size},
          {"allocation", s.allocation},
          {"colocated", p.colocated},
          {"components", components},
          {"beta_max_s", p.beta_max},
          {"iteration_time_s", p.iteration_s},
          {"throughput_samples_per_s", p.throughput_samples_per_s},
          {"fits_memory", p.fits_memory}};
}

int run(const Options& o) {
  const Config c = load_study_config(o.config, o.overrides);
  const auto cost = make_cost_model(c);
  PlannerInputs in;
  in.model = &c.model;
  in.cost = cost.get();
  in.cluster = &c.cluster;
  in.dp = c.parallel.dp;
  in.granularity = c.parallel.tp;
  in.profile_tp = c.parallel.tp;
  in.global_batch = c.parallel.dp * c.schedule.microbatches * c.schedule.microbatch_size;
  in.microbatch_size = c.schedule.microbatch_size;
  if (!o.search_tp) in.tp_choices = {c.parallel.tp};
  in.memory = c.cost.memory;
  in.dip_cap_bytes =
      dip_options().read(c.schedule, "dip").memory_cap_gb * 1e9;  // as dip_lower.cpp reads it
  const std::vector<Component> comps = model_components(c.model);
  const int k = validation_trials(1 - o.confidence, o.p_error);
  if (!o.json) {
    std::printf(
        "%s: %d GPUs, DP %d -> %d per replica in units of TP %d; global batch %d, "
        "microbatch %d\n",
        o.config.c_str(), c.cluster.num_gpus(), in.dp, c.cluster.num_gpus() / in.dp, in.granularity,
        in.global_batch, in.microbatch_size);
  }
  std::fprintf(stderr, "loom plan layout: Bernoulli trials at %zu batch sizes...\n",
               o.sizes.size());
  BatchSource table_source = make_source(c);
  std::vector<BernoulliTrial> table;
  for (int n : o.sizes) table.push_back(bernoulli_trial(in, comps, table_source, n, k));
  if (!o.json) print_trials(comps, table, k);

  const MacroscopicProfile alg2 =
      find_min_profiling_batch(in, make_source(c), 1 - o.confidence, o.p_error, o.n0, o.max_batch);
  if (alg2.b_min == 0) {
    throw InfeasibleError("Alg 2 found no stable profiling batch up to --max-batch " +
                          std::to_string(o.max_batch));
  }
  BatchSource source = make_source(c);
  const ConfigSearch entrain = search_configuration(in, source(alg2.b_min));
  const ConfigSearch disttrain = search_configuration(in, source(1));
  const ConfigSearch dip = colocated_configuration(in, source(in.microbatch_size));
  // Every plan rated on the same large fresh batch: what its layout is worth on the data.
  const std::vector<Sample> dataset = source(kEvaluationSamples);
  const ParallelPlan rated[] = {rate_plan_on(in, entrain.best(), dataset),
                                rate_plan_on(in, disttrain.best(), dataset),
                                rate_plan_on(in, dip.best(), dataset)};
  if (!o.out.empty()) write_layout_config(o, entrain.best(), in.dp);
  if (o.json) {
    std::vector<std::string> names;
    for (const Component& comp : comps) names.push_back(comp.name);
    const nlohmann::json out = {{"config", o.config},
                                {"cost_model", cost->describe()},
                                {"components", names},
                                {"global_batch", in.global_batch},
                                {"microbatch_size", in.microbatch_size},
                                {"validation_batches", k},
                                {"trials", trials_json(table)},
                                {"b_min", alg2.b_min},
                                {"evaluation_samples", kEvaluationSamples},
                                {"plans",
                                 {plan_json("entrain", entrain, rated[0], c.model),
                                  plan_json("disttrain", disttrain, rated[1], c.model),
                                  plan_json("dip", dip, rated[2], c.model)}}};
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::printf("\nb_min = %d (Alg 2 from n0 = %d, doubling; confidence %.2f, p_error %.2f)\n",
              alg2.b_min, o.n0, o.confidence, o.p_error);
  if (in.global_batch < alg2.b_min) {
    std::printf("warning: global batch %d < b_min: Entrain does not guarantee balance (4.4)\n",
                in.global_batch);
  }
  std::printf(
      "\nParallel configurations (Alg 3; Eq 4.2 + P_reshard, %s cost model), like "
      "Table 4.1;\nbeta and iteration rated on %d fresh samples of the workload\n",
      cost->name().c_str(), kEvaluationSamples);
  std::printf("%-10s %8s  %-10s %-34s %9s %9s %10s\n", "planner", "profiled", "allocation",
              "layout per replica", "beta ms", "iter ms", "samples/s");
  print_plan("entrain", entrain, rated[0]);
  print_plan("disttrain", disttrain, rated[1]);
  print_plan("dip", dip, rated[2]);
  print_stages(c.model, entrain.best());
  return 0;
}

}  // namespace

CommandRun attach_plan_layout(CLI::App& sub) {
  auto o = std::make_shared<Options>();
  sub.footer(
      "Entrain's macroscopic planner (dissertation 4.4). Draws k = ceil(ln alpha /\n"
      "ln(1 - p_error)) random batches per profiling size from the config's workload\n"
      "(workload.dataset, workload.csv or the fixed tokens), estimates each component's\n"
      "share of the F + B workload with the config's cost model, rounds it to GPUs\n"
      "(ProportionalAllocation, units of parallel.tp) and prints which allocations appear\n"
      "(Table 4.2). Alg 2 then doubles the profiling size from --n0 until all k draws\n"
      "agree (b_min); Alg 3 searches TP x PP per component on a b_min batch (Eq 4.1 stage\n"
      "DP, Eq 4.2 iteration time + resharding). The DistTrain-like planner does the same on\n"
      "1 sample, the DIP-like one colocates all components on every stage, profiled on one\n"
      "microbatch (Table 4.1). Exit 3 when Alg 2 does not converge by --max-batch.");
  sub.add_option("CONFIG", o->config, "TOML config (model, cluster, cost, workload)")->required();
  sub.add_option("--set", o->overrides, "Override a config key: section.key=value (repeatable)");
  sub.add_option("--sizes", o->sizes, "Profiling batch sizes of the trial table (1 4 16 64 256)")
      ->check(CLI::Range(1, 1 << 20));
  sub.add_option("--confidence", o->confidence, "1 - alpha of Alg 2 (0.95)")
      ->check(finite_range(0.5, 0.999999));
  sub.add_option("--p-error", o->p_error, "p_error of Alg 2 (0.05)")
      ->check(finite_range(1e-6, 0.5));
  sub.add_option("--n0", o->n0, "Alg 2's initial profiling batch (1)")
      ->check(CLI::Range(1, 1 << 20));
  sub.add_option("--max-batch", o->max_batch, "Give up Alg 2 beyond this batch (4096)")
      ->check(CLI::Range(1, 1 << 22));
  sub.add_flag("--json", o->json,
               "Print the trials, b_min and every planner's layout as JSON (SI units)");
  sub.add_flag("--search-tp", o->search_tp,
               "Let Alg 3 choose TP in {1,2,4,8} per component (default: parallel.tp)");
  sub.add_option("--out", o->out,
                 "Write Entrain's layout as a config `loom sim` runs: CONFIG with one "
                 "[parallel.modules.<component>] table each (tp, pp, GPUs of its own), "
                 "schedule.name = cornstarch");
  return [o]() { return run(*o); };
}

}  // namespace loom
