#include "executor/reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "core/index.hpp"
#include "executor/adam.hpp"
#include "executor/host_backend.hpp"
#include "executor/layer_math.hpp"

namespace loom::exec {
namespace {

struct ModuleSpan {
  ModuleId module;
  int first, end;
};

std::vector<ModuleSpan> module_spans(const Model& model) {
  std::vector<ModuleSpan> out;
  for (int l = 0; l < model.num_layers(); ++l) {
    const ModuleId m = model.module_of(l);
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
  PerMicrobatch<std::vector<SampleId>>& one_per_sample = s.samples.emplace_back();
  for (const auto& replica : schedule.samples) {
    for (const auto& mb : replica) {
      for (const SampleId id : mb) one_per_sample.push_back({id});
    }
  }
  s.microbatches = one_per_sample.ssize();
  s.programs.resize(1);
  const std::vector<ModuleSpan> spans = module_spans(model);
  std::vector<Op>& program = s.programs.front();
  for (const MicrobatchId j : IdRange<MicrobatchId>(s.microbatches)) {
    for (const ModuleSpan& m : spans)
      program.push_back(Compute{.pass = Pass::kF,
                                .stage = StageId{0},
                                .microbatch = j,
                                .module = m.module,
                                .first_layer = m.first,
                                .end_layer = m.end});
    for (auto it = spans.rbegin(); it != spans.rend(); ++it)
      program.push_back(Compute{.pass = Pass::kB,
                                .stage = StageId{0},
                                .microbatch = j,
                                .module = it->module,
                                .first_layer = it->first,
                                .end_layer = it->end});
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
  o.collect_tensors = true;
  return make_host_executor()->run(p, o).gradients.at(RankId{0});
}

namespace {

/// ||x - ref||_2 / ||ref||_2 (the absolute norm when ref is zero).
double relative_error(const std::vector<float>& x, const std::vector<float>& ref) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = static_cast<double>(x[i]) - ref[i];
    diff += d * d;
    norm += static_cast<double>(ref[i]) * ref[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

void record(GradientCheck& check, const std::string& where, double rel, const char* what) {
  ++check.tensors_checked;
  if (check.worst.empty() || rel > check.max_relative_error) {
    check.max_relative_error = rel;
    check.worst = where;
  }
  if (!(rel <= check.tolerance)) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.3g", rel);
    check.failures.push_back(where + ": " + what + " relative error " + buf + " > tolerance");
  }
}

/// The optimizer steps' half of the check: every rank whose program has an OptimizerStep
/// must hold its trainable parameters as one Adam step from their initial values with the
/// reference gradients leaves them. The values are compared, not the updates: Adam's
/// update g / (|g| + eps) turns the summation-order noise of near-zero gradients into
/// update noise, while a missed or doubled step moves the values by lr / |w|, about 1e-2
/// relative for these initialisations, far above the tolerance.
void check_optimizer_steps(const ExecProblem& problem, const ExecResult& result,
                           const Gradients& reference, GradientCheck& check) {
  const Schedule& schedule = *problem.schedule;
  const Model& model = *problem.model;
  std::map<int, LayerTensors> initial;
  for (const RankId r : schedule.rank_ids()) {
    const auto& program = schedule.programs[r];
    const bool steps = std::any_of(program.begin(), program.end(), [](const Op& op) {
      return std::holds_alternative<OptimizerStep>(op);
    });
    const Parameters none;
    const Parameters& params = result.parameters.contains(r) ? result.parameters[r] : none;
    if (!steps) continue;
    if (params.empty() && !result.gradients.at(r).empty()) {
      check.failures.push_back("rank " + to_string(r) + ": ran no optimizer step");
      continue;
    }
    for (const auto& [key, value] : params) {
      const std::string where = describe(key) + " (rank " + to_string(r) + ")";
      const auto grad = reference.find(key);
      if (grad == reference.end()) {
        check.failures.push_back(where + ": updated but has no reference gradient");
        continue;
      }
      auto it = initial.find(key.layer);
      if (it == initial.end())
        it = initial
                 .emplace(key.layer,
                          init_parameters(model.layer(key.layer), key.layer, problem.seed))
                 .first;
      std::vector<float> expected = it->second.at(key.name).data;
      AdamState state;
      adam_step(expected, grad->second, state);
      record(check, where, relative_error(value, expected), "updated parameters'");
    }
  }
}

}  // namespace

GradientCheck check_gradients(const ExecProblem& problem, const ExecResult& result,
                              const Gradients& reference, double tolerance) {
  GradientCheck check;
  check.tolerance = tolerance;
  const Schedule& schedule = *problem.schedule;
  const Model& model = *problem.model;
  std::map<ReplicaId, std::set<ParamKey>> seen;  // replica -> tensors some rank holds
  for (const RankId r : result.gradients.ids()) {
    const ReplicaId replica = schedule.ranks.at(r).replica;
    for (const auto& [key, grad] : result.gradients[r]) {
      const std::string where = describe(key) + " (rank " + to_string(r) + ")";
      if (model.layer(key.layer).frozen) {
        check.failures.push_back(where + ": frozen but has a gradient");
        continue;
      }
      const auto it = reference.find(key);
      if (it == reference.end() || it->second.size() != grad.size()) {
        check.failures.push_back(where + ": not in the reference");
        continue;
      }
      seen[replica].insert(key);
      record(check, where, relative_error(grad, it->second), "gradient");
    }
  }
  std::set<ParamKey> anywhere;  // a routed expert lives on one member of its EP group
  for (const auto& [replica, keys] : seen) anywhere.insert(keys.begin(), keys.end());
  for (const ReplicaId d : schedule.samples.ids()) {
    for (const auto& [key, grad] : reference) {
      if (is_expert_parameter(key.name) ? !anywhere.count(key) : !seen[d].count(key))
        check.failures.push_back(describe(key) + ": no rank of replica " + to_string(d) +
                                 " has its gradient");
    }
  }
  check_optimizer_steps(problem, result, reference, check);
  return check;
}

}  // namespace loom::exec
