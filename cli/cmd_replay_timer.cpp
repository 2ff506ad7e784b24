// The simulation-mode iteration timer of `loom replay` (see replay_timer.hpp).
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>

#include "cli/replay_timer.hpp"
#include "cli/study.hpp"
#include "core/errors.hpp"
#include "core/evaluator.hpp"
#include "sim/simgrid_backend.hpp"

namespace loom {
namespace {

struct Group {
  PipelineLayout pipeline;
  int count = 0;
};

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
  const double memory_factor = layout.state_memory_factor;
  std::vector<std::string> v = o.overrides;
  const PipelineLayout& p = g.pipeline;
  const int stages =
      p.stage_layers.empty() ? p.nodes * o.gpus_per_node : static_cast<int>(p.stage_layers.size());
  v.push_back("cluster.nodes=" + std::to_string(p.nodes * g.count));
  v.push_back("parallel.pp=" + std::to_string(stages));
  v.push_back("parallel.dp=" + std::to_string(g.count));
  v.push_back("parallel.tp=1");
  if (p.microbatches > 0) v.push_back("schedule.microbatches=" + std::to_string(p.microbatches));
  if (!p.stage_layers.empty()) {
    std::string list;
    for (int l : p.stage_layers) list += (list.empty() ? "" : ",") + std::to_string(l);
    v.push_back("schedule.stage_layers=[" + list + "]");
  }
  if (memory_factor != 1) {
    // Bamboo keeps a second copy of model states and activations (§2.7.1: "requiring 2x
    // memory"): the same plan must fit in 1/factor of the GPU.
    v.push_back("cluster.gpu_memory=" + std::to_string(o.gpu_memory_bytes / memory_factor));
  }
  if (layout.activation_factor == 2) activation_precision_overrides(o, v);
  if (layout.activation_checkpointing) {
    // Loom's memory check keeps every live microbatch's activations; with recomputation
    // the planner's memory model decides feasibility, so lift the per-GPU limit here.
    v.push_back("cluster.gpu_memory=1e18");
  }
  return v;
}

double run_study(const StudyTimerOptions& o, const std::vector<std::string>& overrides) {
  const auto study = prepare_study(o.config, overrides);
  if (o.backend == "evaluator")
    return evaluate(study->schedule, study->config.cluster).iteration_time_s();
  SimGridOptions sg;
  sg.network_model = study->config.sim.network_model;
  return run_simgrid(study->schedule, study->config.cluster, sg).iteration_time_s();
}

/// Runs `o`'s study in a child process and rethrows its error kind in the parent.
double run_study_forked(const StudyTimerOptions& o, const std::vector<std::string>& overrides) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("replay: pipe() failed");
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("replay: fork() failed");
  if (pid == 0) {
    close(fds[0]);
    std::string reply;
    try {
      const double t = run_study(o, overrides);
      reply = "O" + std::string(reinterpret_cast<const char*>(&t), sizeof t);
    } catch (const InfeasibleError& e) {
      reply = std::string("I") + e.what();
    } catch (const InputError& e) {
      reply = std::string("E") + e.what();
    } catch (const std::exception& e) {
      reply = std::string("X") + e.what();
    }
    size_t done = 0;
    while (done < reply.size()) {
      const ssize_t n = write(fds[1], reply.data() + done, reply.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    _exit(0);
  }
  close(fds[1]);
  std::string reply;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;)
    reply.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (reply.empty()) throw std::runtime_error("replay: the SimGrid child process died");
  const std::string message = reply.substr(1);
  switch (reply[0]) {
    case 'O': {
      double t = 0;
      std::memcpy(&t, message.data(), sizeof t);
      return t;
    }
    case 'I':
      throw InfeasibleError(message);
    case 'E':
      throw InputError(message);
    default:
      throw std::runtime_error(message);
  }
}

}  // namespace

IterationTimer make_study_timer(const StudyTimerOptions& options) {
  auto cache = std::make_shared<std::map<std::string, double>>();
  return [options, cache](const Layout& layout) {
    std::map<std::string, Group> groups;
    for (const PipelineLayout& p : layout.pipelines) {
      Layout one{{p}, 1};
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
          t = options.backend == "simgrid" ? run_study_forked(options, overrides)
                                           : run_study(options, overrides);
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
