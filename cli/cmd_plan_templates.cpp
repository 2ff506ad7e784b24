// loom plan templates: Oobleck's pipeline templates (dissertation §2.4.1) and their
// instantiation (Eq 2.5) with batch distribution (Eq 2.6), for a config's model or for a
// measured per-layer profile.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

#include "app/study.hpp"
#include "cli/commands.hpp"
#include "core/config.hpp"
#include "core/errors.hpp"
#include "core/index.hpp"
#include "core/units.hpp"
#include "core/workload.hpp"
#include "schedulers/planners/oobleck/oobleck_planner.hpp"

namespace loom {
namespace {

struct Options {
  std::string config;
  std::vector<std::string> overrides;
  std::string profile;
  int nodes = 0;          // N; 0 = cluster.nodes (config) / required (profile)
  int available = 0;      // N' to instantiate on; 0 = N
  int f = -1;             // -1 = replay.fault_tolerance (config) / 1 (profile)
  int gpus_per_node = 0;  // profile mode
  std::string gpu_memory;
  std::string allreduce_in_node, allreduce_across_nodes;
  int microbatch_size = 0;
  int global_batch = 0;
  bool json = false;
  bool quiet = false;  // no progress lines on stderr
};

/// Progress lines on stderr: each step with the seconds since the command started (a
/// 1,000-node plan takes a while; the output itself stays on stdout).
class Progress {
 public:
  explicit Progress(bool quiet) : quiet_(quiet) {}
  void step(const std::string& what) const {
    if (quiet_) return;
    const std::chrono::duration<double> t = std::chrono::steady_clock::now() - start_;
    std::fprintf(stderr, "loom: plan templates: %s (%.1f s)\n", what.c_str(), t.count());
  }

 private:
  bool quiet_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

double quantity(const std::string& text, const char* option, bool bytes) {
  const auto v = bytes ? parse_bytes(text) : parse_seconds(text);
  if (!v || *v < 0) {
    throw InputError(std::string("option ") + option + ": expected " +
                     (bytes ? "a size such as 40GB" : "a time such as 1.5ms") + ", got '" + text +
                     "'");
  }
  return *v;
}

oobleck::PlanningProblem from_config(const Options& o) {
  // Only the model, cluster, cost model and one microbatch are needed: templates do not use
  // the config's own parallel layout, so it need not fit (`--nodes` may differ).
  const Config c = load_study_config(o.config, o.overrides);
  const auto cost = make_cost_model(c);
  const int b = c.schedule.microbatch_size;
  std::vector<Sample> samples = c.workload.csv.empty()
                                    ? synthetic_samples(b, c.workload.tokens)
                                    : load_samples_csv(c.workload.csv, c.workload.image_tokens);
  if (isize(samples) < b) {
    throw InputError(c.workload.csv + ": has " + std::to_string(samples.size()) +
                     " samples, fewer than one microbatch (schedule.microbatch_size = " +
                     std::to_string(b) + ")");
  }
  const std::vector<const Sample*> microbatch = first_samples(samples, b);
  oobleck::PlanningProblem p;
  p.layers = oobleck::profile_from_model(c.model, *cost, microbatch, c.cluster, c.cost.memory);
  p.gpus_per_node = c.cluster.gpus_per_node;
  p.gpu_memory_bytes = c.cluster.gpu.memory_bytes;
  p.fault_tolerance = o.f >= 0 ? o.f : c.replay.fault_tolerance;
  p.max_nodes = o.nodes > 0 ? o.nodes : c.cluster.nodes;
  p.microbatch_size = c.schedule.microbatch_size;
  p.global_batch = c.replay.global_batch > 0
                       ? c.replay.global_batch
                       : c.parallel.dp * c.schedule.microbatches * c.schedule.microbatch_size;
  return p;
}

oobleck::PlanningProblem from_profile(const Options& o) {
  if (o.nodes < 1) throw InputError("loom plan templates --profile: --nodes N is required");
  if (o.gpus_per_node < 1)
    throw InputError("loom plan templates --profile: --gpus-per-node G is required");
  oobleck::PlanningProblem p;
  p.layers = oobleck::load_profile_csv(o.profile);
  const double in_node = o.allreduce_in_node.empty()
                             ? -1
                             : quantity(o.allreduce_in_node, "--allreduce-in-node", false);
  const double across = o.allreduce_across_nodes.empty()
                            ? -1
                            : quantity(o.allreduce_across_nodes, "--allreduce-across-nodes", false);
  for (oobleck::LayerCost& l : p.layers) {  // flags give every layer the same cost
    if (in_node >= 0) l.allreduce_in_node_s = in_node;
    if (across >= 0) l.allreduce_across_nodes_s = across;
  }
  p.gpus_per_node = o.gpus_per_node;
  p.gpu_memory_bytes = o.gpu_memory.empty() ? 0 : quantity(o.gpu_memory, "--gpu-memory", true);
  p.fault_tolerance = o.f >= 0 ? o.f : 1;
  p.max_nodes = o.nodes;
  p.microbatch_size = o.microbatch_size > 0 ? o.microbatch_size : 1;
  // Dissertation Table 2.1 trains the GPT-3 2.7b/6.7b models with a global batch of 1024.
  p.global_batch = o.global_batch > 0 ? o.global_batch : 1024;
  return p;
}

std::string ms(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f ms", s * 1e3);
  return buf;
}

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
  return buf;
}

void print_text(const oobleck::PlanningProblem& p,
                const oobleck::PerTemplate<oobleck::PipelineTemplate>& ts,
                const oobleck::Instantiation& inst) {
  std::cout << "Oobleck templates: N = " << p.max_nodes << " nodes x " << p.gpus_per_node
            << " GPUs, f = " << p.fault_tolerance << ", " << p.layers.size()
            << " layers, n_0 = " << ts.front().nodes << " (sizes " << ts.front().nodes << ".."
            << ts.back().nodes << ")\n";
  for (const oobleck::TemplateId i : ts.ids()) {
    const oobleck::PipelineTemplate& t = ts[i];
    std::cout << "template " << i << ": " << t.nodes << " nodes, " << t.num_stages()
              << " stages, planned time (N_b = 4S) " << ms(t.planned_time_s) << ", slowest stage "
              << t.slowest_stage << " (" << ms(t.slowest_s) << ")\n";
    for (size_t k = 0; k < t.stages.size(); ++k) {
      const oobleck::TemplateStage& s = t.stages[k];
      std::cout << "  stage " << k << ": layers [" << s.layer_begin << "," << s.layer_end
                << ") node " << s.node << " GPUs " << s.first_gpu << ".."
                << s.first_gpu + s.gpus - 1 << "  F " << ms(s.forward_s) << "  B "
                << ms(s.backward_s) << "  " << gib(s.memory_bytes) << "/GPU\n";
    }
  }
  std::cout << "instantiation on " << inst.num_nodes() << " nodes: " << inst.pipelines.size()
            << " pipelines, global batch " << inst.global_batch << " (microbatch "
            << p.microbatch_size << "), iteration " << ms(inst.iteration_time_s) << " (sync "
            << ms(inst.sync_time_s) << "), " << inst.throughput_samples_per_s() << " samples/s\n";
  if (inst.search != "exact") std::cout << "  search: " << inst.search << "\n";
  for (size_t i = 0; i < inst.pipelines.size(); ++i) {
    const oobleck::Pipeline& pl = inst.pipelines[i];
    const oobleck::PipelineTemplate& t = ts[pl.template_index];
    std::cout << "  pipeline " << i << ": template " << pl.template_index << " on nodes";
    for (int n : pl.nodes) std::cout << " " << n;
    std::cout << ", " << pl.microbatches << " microbatches, "
              << ms(t.iteration_time_s(pl.microbatches)) << "\n";
  }
}

nlohmann::json to_json(const oobleck::PlanningProblem& p,
                       const oobleck::PerTemplate<oobleck::PipelineTemplate>& ts,
                       const oobleck::Instantiation& inst) {
  nlohmann::json j;
  j["problem"] = {{"nodes", p.max_nodes},
                  {"gpus_per_node", p.gpus_per_node},
                  {"gpu_memory_bytes", p.gpu_memory_bytes},
                  {"fault_tolerance", p.fault_tolerance},
                  {"layers", p.layers.size()},
                  {"microbatch_size", p.microbatch_size},
                  {"global_batch", p.global_batch}};
  j["n0"] = ts.front().nodes;
  j["templates"] = nlohmann::json::array();
  for (const oobleck::PipelineTemplate& t : ts) {
    nlohmann::json stages = nlohmann::json::array();
    for (const oobleck::TemplateStage& s : t.stages) {
      stages.push_back({{"layers", {s.layer_begin, s.layer_end}},
                        {"gpus", s.gpus},
                        {"node", s.node},
                        {"first_gpu", s.first_gpu},
                        {"forward_s", s.forward_s},
                        {"backward_s", s.backward_s},
                        {"memory_bytes", s.memory_bytes}});
    }
    j["templates"].push_back({{"nodes", t.nodes},
                              {"stages", stages},
                              {"iteration_time_s", t.planned_time_s},
                              {"planned_microbatches", 4 * t.num_stages()},
                              {"t1_s", t.t1_s},
                              {"t3_s", t.t3_s},
                              {"slowest_stage", t.slowest_stage}});
  }
  nlohmann::json pipes = nlohmann::json::array();
  for (const oobleck::Pipeline& pl : inst.pipelines) {
    pipes.push_back(
        {{"template", pl.template_index},
         {"nodes", pl.nodes},
         {"microbatches", pl.microbatches},
         {"iteration_time_s", ts[pl.template_index].iteration_time_s(pl.microbatches)}});
  }
  j["instantiation"] = {{"nodes", inst.num_nodes()},
                        {"counts", inst.counts},
                        {"pipelines", pipes},
                        {"iteration_time_s", inst.iteration_time_s},
                        {"sync_time_s", inst.sync_time_s},
                        {"search", inst.search},
                        {"throughput_samples_per_s", inst.throughput_samples_per_s()}};
  return j;
}

}  // namespace

CommandRun attach_plan_templates(CLI::App& sub) {
  auto o = std::make_shared<Options>();
  sub.footer(
      "Two forms:\n"
      "  loom plan templates CONFIG [--set k=v]... [--nodes N] [--f F] [--json]\n"
      "  loom plan templates --profile layers.csv --nodes N --gpus-per-node G\n"
      "      [--gpu-memory 40GB] [--allreduce-in-node 0.2ms] [--allreduce-across-nodes 2ms]\n"
      "      [--microbatch-size b] [--global-batch B] [--f F] [--json]\n"
      "The profile CSV has columns layer,forward_s,backward_s,memory_bytes (one microbatch\n"
      "on one GPU) and optionally state_bytes,allreduce_in_node_s,allreduce_across_nodes_s.\n"
      "Prints the templates n_0 .. N - f n_0 (dissertation §2.4.1) and the instantiation on\n"
      "N' nodes (Eq 2.5) with its batch distribution (Eq 2.6). Exit 3 when fewer than\n"
      "(f+1) n_0 nodes are available, or more than 10,000. Past the exact search's limits\n"
      "the instantiation is the best X of at most two template sizes (printed as `search`).");
  sub.add_option("CONFIG", o->config, "TOML config (model, cluster, cost model)");
  sub.add_option("--set", o->overrides, "Override a config key: section.key=value (repeatable)");
  sub.add_option("--profile", o->profile, "Measured per-layer profile CSV instead of a config");
  sub.add_option("--nodes", o->nodes, "N: nodes at the start (default: cluster.nodes)")
      ->check(CLI::Range(1, 100000));
  sub.add_option("--available", o->available, "N': nodes to instantiate on (default: N)")
      ->check(CLI::Range(1, 100000));
  sub.add_option("--f", o->f, "Fault tolerance f (default: replay.fault_tolerance, or 1)")
      ->check(CLI::Range(0, 100000));
  sub.add_option("--gpus-per-node", o->gpus_per_node, "GPUs per node (profile form)")
      ->check(CLI::Range(1, 1024));
  sub.add_option("--gpu-memory", o->gpu_memory,
                 "GPU memory, e.g. 40GB (profile form; default unlimited)");
  sub.add_option("--allreduce-in-node", o->allreduce_in_node,
                 "Per-layer 2-GPU all-reduce time inside a node (profile form)");
  sub.add_option("--allreduce-across-nodes", o->allreduce_across_nodes,
                 "Per-layer 2-node all-reduce time across nodes (profile form)");
  sub.add_option("--microbatch-size", o->microbatch_size,
                 "b: samples per microbatch (profile form; 1)")
      ->check(CLI::Range(1, 1 << 20));
  sub.add_option("--global-batch", o->global_batch, "B: samples per iteration (profile form; 1024)")
      ->check(CLI::Range(1, 1 << 30));
  sub.add_flag("--json", o->json, "Print JSON: each template's stages and the instantiation");
  sub.add_flag("--quiet,-q", o->quiet, "No progress lines on stderr");
  return [o]() {
    if (o->config.empty() == o->profile.empty()) {
      throw InputError("loom plan templates: give either a CONFIG or --profile FILE (see --help)");
    }
    const Progress progress(o->quiet);
    progress.step("reading the " + std::string(o->config.empty() ? "profile" : "config"));
    const oobleck::PlanningProblem p = o->config.empty() ? from_profile(*o) : from_config(*o);
    const int available = o->available > 0 ? o->available : p.max_nodes;
    if (available > p.max_nodes) {
      throw InputError("option --available: " + std::to_string(available) +
                       " nodes is more than N = " + std::to_string(p.max_nodes));
    }
    if (available > oobleck::kMaxInstantiationNodes) {  // refuse before any work
      throw InfeasibleError("loom plan templates: " + std::to_string(available) +
                            " nodes are more than the planner instantiates (at most " +
                            std::to_string(oobleck::kMaxInstantiationNodes) + " nodes)");
    }
    progress.step("generating templates for N = " + std::to_string(p.max_nodes) + " nodes");
    const oobleck::PerTemplate<oobleck::PipelineTemplate> ts = oobleck::generate_templates(p);
    progress.step(std::to_string(ts.size()) + " templates; instantiating " +
                  std::to_string(available) + " nodes (Eq 2.5, 2.6)");
    std::vector<int> nodes(available);  // node ids 0 .. available-1
    std::iota(nodes.begin(), nodes.end(), 0);
    const oobleck::Instantiation inst = oobleck::instantiate(p, ts, nodes);
    progress.step("planned (search: " + inst.search + ")");
    if (o->json) {
      std::cout << to_json(p, ts, inst).dump(2) << "\n";
    } else {
      print_text(p, ts, inst);
    }
    return 0;
  };
}

}  // namespace loom
