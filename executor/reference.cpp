#include "executor/reference.hpp"

#include <cmath>
#include <cstdio>
#include <set>

#include "executor/host_backend.hpp"

namespace loom::exec {
namespace {

struct ModuleSpan {
  int module, first, end;
};

std::vector<ModuleSpan> module_spans(const Model& model) {
  std::vector<ModuleSpan> out;
  for (int l = 0; l < model.num_layers(); ++l) {
    const int m = model.layers()[static_cast<size_t>(l)].module;
    if (out.empty() || out.back().module != m)
      out.push_back({m, l, l + 1});
    else
      out.back().end = l + 1;
  }
  return out;
}

std::string describe(const ParamKey& key) {
  return "layer " + std::to_string(key.layer) + " " + key.name;
}

}  // namespace

Schedule sequential_schedule(const Schedule& schedule, const Model& model) {
  Schedule s;
  s.scheduler = "sequential-reference";
  s.module_names = schedule.module_names;
  s.num_stages = 1;
  s.ranks = {RankInfo{}};
  s.samples.resize(1);
  for (const auto& replica : schedule.samples) {
    for (const auto& mb : replica) {
      for (int id : mb) s.samples[0].push_back({id});
    }
  }
  s.microbatches = static_cast<int>(s.samples[0].size());
  s.programs.resize(1);
  const std::vector<ModuleSpan> spans = module_spans(model);
  for (int j = 0; j < s.microbatches; ++j) {
    for (const ModuleSpan& m : spans)
      s.programs[0].push_back(Compute{Pass::kF, 0, j, m.module, m.first, m.end});
    for (auto it = spans.rbegin(); it != spans.rend(); ++it)
      s.programs[0].push_back(Compute{Pass::kB, 0, j, it->module, it->first, it->end});
  }
  s.static_memory.resize(1);
  return s;
}

Gradients reference_gradients(const ExecProblem& problem, const ExecOptions& options) {
  const Schedule seq = sequential_schedule(*problem.schedule, *problem.model);
  ExecProblem p = problem;
  p.schedule = &seq;
  ExecOptions o = options;
  o.fault.reset();
  o.rendezvous_file.clear();  // one in-process run: nothing to meet
  return make_host_executor()->run(p, o).gradients.at(0);
}

GradientCheck check_gradients(const ExecProblem& problem, const ExecResult& result,
                              const Gradients& reference, double tolerance) {
  GradientCheck check;
  check.tolerance = tolerance;
  const Schedule& schedule = *problem.schedule;
  const Model& model = *problem.model;
  std::map<int, std::set<ParamKey>> seen;  // replica -> tensors some rank holds
  for (int r = 0; r < static_cast<int>(result.gradients.size()); ++r) {
    const int replica = schedule.ranks.at(static_cast<size_t>(r)).replica;
    for (const auto& [key, grad] : result.gradients[static_cast<size_t>(r)]) {
      const std::string where = describe(key) + " (rank " + std::to_string(r) + ")";
      if (model.layer(key.layer).frozen) {
        check.failures.push_back(where + ": frozen but has a gradient");
        continue;
      }
      const auto it = reference.find(key);
      if (it == reference.end() || it->second.size() != grad.size()) {
        check.failures.push_back(where + ": not in the reference");
        continue;
      }
      double diff = 0, norm = 0;
      for (size_t i = 0; i < grad.size(); ++i) {
        const double d = static_cast<double>(grad[i]) - it->second[i];
        diff += d * d;
        norm += static_cast<double>(it->second[i]) * it->second[i];
      }
      const double rel = norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
      ++check.tensors_checked;
      seen[replica].insert(key);
      if (check.worst.empty() || rel > check.max_relative_error) {
        check.max_relative_error = rel;
        check.worst = where;
      }
      if (!(rel <= tolerance)) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.3g", rel);
        check.failures.push_back(where + ": relative error " + buf + " > tolerance");
      }
    }
  }
  for (size_t d = 0; d < schedule.samples.size(); ++d) {
    for (const auto& [key, grad] : reference) {
      if (!seen[static_cast<int>(d)].count(key))
        check.failures.push_back(describe(key) + ": no rank of replica " + std::to_string(d) +
                                 " has its gradient");
    }
  }
  return check;
}

}  // namespace loom::exec
