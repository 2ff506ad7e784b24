#include "executor/dataflow.hpp"

#include <algorithm>
#include <optional>
#include <set>
#include <variant>

#include "core/errors.hpp"

namespace loom::exec {

void check_schedule_executable(const Schedule& schedule) {
  for (const RankId r : schedule.rank_ids()) {
    const auto& program = schedule.programs[r];
    for (std::size_t i = 0; i < program.size(); ++i) {
      const auto* coll = std::get_if<Collective>(&program[i]);
      // FSDP's parameter all-gathers and gradient reduce-scatters are async; context
      // parallelism's K/V exchanges are not. (A compute that waits for async collectives,
      // a woven MoE pair's, runs as is: the host's collectives end before it starts.)
      if (coll && coll->async &&
          (coll->kind == CollectiveKind::kReduceScatter ||
           coll->kind == CollectiveKind::kAllGather)) {
        throw InfeasibleError("rank " + to_string(r) + " op #" + std::to_string(i) + " (" +
                              to_string(program[i], schedule) +
                              "): the schedule shards parameters (parallel.fsdp), which the "
                              "executors do not run (they keep every rank's parameters whole); "
                              "run it with `loom sim` or drop parallel.fsdp");
      }
    }
  }
}

std::vector<int> rank_layers(const Schedule& schedule, RankId rank) {
  std::set<int> layers;
  for (const Op& op : schedule.programs.at(rank)) {
    const auto* c = std::get_if<Compute>(&op);
    if (!c || c->pass != Pass::kF || is_redundant(*c)) continue;
    for (int l = c->first_layer; l < c->end_layer; ++l) layers.insert(l);
  }
  return {layers.begin(), layers.end()};
}

std::map<std::size_t, std::vector<int>> allreduce_layers(
    const Schedule& schedule, const Model& model, RankId rank,
    const std::function<bool(const Collective&)>& experts_only) {
  const auto& program = schedule.programs.at(rank);
  std::vector<int> trained;
  for (int l : rank_layers(schedule, rank)) {
    if (!model.layer(l).frozen) trained.push_back(l);
  }
  std::map<std::size_t, std::vector<int>> out;
  std::map<ModuleId, std::size_t> module_op;  // module -> its first all-reduce on this rank
  std::optional<std::size_t> bucket_op;       // the last of those: takes modules without their own
  for (std::size_t index = 0; index < program.size(); ++index) {
    const auto* c = std::get_if<Collective>(&program[index]);
    if (!c || c->kind != CollectiveKind::kAllReduce) continue;
    std::vector<int>& layers = out[index];
    if (c->tied_embedding) continue;  // the host math has no embedding: it sums nothing
    if (experts_only && experts_only(*c)) continue;  // the experts' own: their backend's
    if (c->end_layer > c->first_layer) {             // a gradient bucket: its layer range
      for (int l : trained) {
        if (l >= c->first_layer && l < c->end_layer) layers.push_back(l);
      }
    } else if (module_op.try_emplace(c->module, index).second) {
      bucket_op = index;
    }
  }
  if (!bucket_op) return out;
  for (int l : trained) {
    const auto it = module_op.find(model.module_of(l));
    out[it == module_op.end() ? *bucket_op : it->second].push_back(l);
  }
  return out;
}

}  // namespace loom::exec
