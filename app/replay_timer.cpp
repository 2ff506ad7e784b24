// The simulation-mode iteration timer of `loom replay` (see replay_timer.hpp).
#include "app/replay_timer.hpp"

#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>

#include "app/study_run.hpp"
#include "core/errors.hpp"
#include "core/index.hpp"

namespace loom {
namespace {

struct Group {
  PipelineLayout pipeline;
  int count = 0;
};

std::string int_list(const std::vector<int>& values) {
  std::string list;
  for (int x : values) list += (list.empty() ? "" : ",") + std::to_string(x);
  return "[" + list + "]";
}

/// Activations at twice the config's dtype (e.g. bf16 -> fp32) with the model states per
/// parameter unchanged: the dtype also sets the weights' bytes, so the optimizer term gives
/// back the difference (bf16 weights + 10 B optimizer = fp32 weights + 8 B).
void activation_precision_overrides(const StudyTimerOptions& o, std::vector<std::string>& v) {
  int bytes = 0;
  for (const auto& [name, b] : o.modules) {
    if (bytes != 0 && b != bytes)
      throw InputError("replay.bamboo_activation_factor = 2 needs every module at one dtype");
    bytes = b;
  }
  if (bytes != 2 || o.optimizer_bytes_per_param < 2)
    throw InputError(
        "replay.bamboo_activation_factor = 2 needs bf16/fp16 modules and "
        "cost.optimizer_bytes_per_param >= 2");
  for (const auto& m : o.modules) v.push_back("model.modules." + m.first + ".dtype=fp32");
  v.push_back("cost.optimizer_bytes_per_param=" + std::to_string(o.optimizer_bytes_per_param - 2));
}

std::vector<std::string> group_overrides(const StudyTimerOptions& o, const Group& g,
                                         const Layout& layout) {
  std::vector<std::string> v = o.overrides;
  const PipelineLayout& p = g.pipeline;
  const int ranks = p.nodes * o.gpus_per_node;
  const int stages = p.stage_layers.empty() ? ranks : isize(p.stage_layers);
  v.push_back("cluster.nodes=" + std::to_string(p.nodes * g.count));
  // A failed-over pipeline has one rank per node; its failed stages ride on neighbours.
  v.push_back("parallel.pp=" + std::to_string(p.failed_over.empty() ? stages : ranks));
  v.push_back("parallel.dp=" + std::to_string(g.count));
  v.push_back("parallel.tp=1");
  if (!layout.scheduler.empty()) v.push_back("schedule.name=" + layout.scheduler);
  if (layout.microbatch_size > 0)
    v.push_back("schedule.microbatch_size=" + std::to_string(layout.microbatch_size));
  if (p.microbatches > 0) v.push_back("schedule.microbatches=" + std::to_string(p.microbatches));
  if (!p.stage_layers.empty()) {
    v.push_back("schedule.layout=\"\"");  // the planner's split replaces a config's layout
    v.push_back("schedule.stage_layers=" + int_list(p.stage_layers));
  }
  if (!p.failed_over.empty()) {
    // A failed-over pipeline is Bamboo's: the timer's default partition, no stage_layers.
    v.push_back("schedule.bamboo.failed_over=" + int_list(p.failed_over));
  }
  if (layout.activation_factor == 2) activation_precision_overrides(o, v);
  if (!layout.activation_checkpointing) v.push_back("cost.recompute=none");  // e.g. Bamboo
  if (layout.activation_checkpointing || !p.failed_over.empty()) {
    // Loom's memory check keeps every live microbatch's activations; with recomputation
    // the planner's memory model decides feasibility, so lift the per-GPU limit here. A
    // failed-over node holds what it held before (its stage and the copy it promotes), so
    // a failover never runs out of memory where the pipeline did not.
    v.push_back("cluster.gpu_memory=1e18");
  }
  return v;
}

}  // namespace

IterationTimer make_study_timer(const StudyTimerOptions& options) {
  auto cache = std::make_shared<std::map<std::string, double>>();
  return [options, cache](const Layout& layout) {
    std::map<std::string, Group> groups;
    for (const PipelineLayout& p : layout.pipelines) {
      const Layout one{.pipelines = {p}};
      Group& g = groups[one.key()];
      g.pipeline = p;
      ++g.count;
    }
    double slowest = 0;
    for (const auto& [key, g] : groups) {
      const std::vector<std::string> overrides = group_overrides(options, g, layout);
      std::string id;
      for (const std::string& s : overrides) id += s + "\n";
      auto it = cache->find(id);
      if (it == cache->end()) {
        double t = 0;
        try {
          try {
            t = iteration_time(options.config, overrides, options.backend);
          } catch (const InputError& e) {
            // In simulation mode the config planned at the start with replay.scheduler, so
            // what fails in one of its templates is that pipeline's shape (e.g. 1 stage
            // under a scheduler that needs encoder and LLM stages): the policy cannot use
            // it, like one that does not fit memory. Bamboo-like's own shapes were checked
            // at the start (cmd_replay.cpp): an error there stays an input error.
            if (!layout.scheduler.empty()) throw;
            throw InfeasibleError(std::to_string(g.count) + " x " + key + ": " + e.what());
          }
        } catch (const InfeasibleError& e) {
          if (options.progress)
            std::cerr << "loom: " << g.count << " x " << key << " cannot run: " << e.what() << "\n";
          throw;
        }
        it = cache->emplace(id, t).first;
        if (options.progress)
          std::cerr << "loom: simulated " << g.count << " x " << key << " with " << options.backend
                    << ": " << t << " s per iteration\n";
      }
      slowest = std::max(slowest, it->second);
    }
    return slowest;
  };
}

}  // namespace loom
