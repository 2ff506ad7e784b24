#include "schedulers/lowering/stage_graph.hpp"

#include <algorithm>

#include "core/dataflow.hpp"
#include "core/errors.hpp"
#include "core/index.hpp"

namespace loom {

std::vector<StageRange> plan_stages(const SchedulingProblem& problem) {
  return plan_stages(problem, problem.parallel.pp);
}

std::vector<StageRange> plan_stages(const SchedulingProblem& problem, int stages) {
  const Model& model = *problem.model;
  if (!problem.schedule.stage_layers.empty()) {
    const std::vector<int>& given = problem.schedule.stage_layers;
    if (!problem.schedule.layout.empty() && isize(given) != stages) {
      throw InputError("schedule.layout: " + std::to_string(given.size()) +
                       " stages but the schedule runs " + std::to_string(stages) +
                       " (parallel.pp = " + std::to_string(problem.parallel.pp) + " x " +
                       std::to_string(stages / problem.parallel.pp) +
                       " chunks per rank); a layout lists every virtual stage, chunk by chunk");
    }
    return partition_explicit(given, model.num_layers(), stages);
  }
  if (stages > model.num_layers()) {
    const bool virt = stages != problem.parallel.pp;
    throw InputError(
        (virt ? "parallel.pp: parallel.pp x the scheduler's chunks per rank = " : "parallel.pp: ") +
        std::to_string(stages) + " pipeline stages but the model has only " +
        std::to_string(model.num_layers()) + " layers (each stage needs at least one)");
  }
  // The representative microbatch: the first one of the iteration.
  const auto costs = layer_costs(model, *problem.cost, problem.schedule.partition_view,
                                 first_samples(problem.samples, problem.schedule.microbatch_size),
                                 problem.parallel.tp);
  return partition_min_bottleneck(costs, stages);
}

StageGraph chain_stages(const Model& model, const std::vector<StageRange>& ranges) {
  StageGraph graph;
  for (const StageRange& r : ranges) {
    std::vector<int> layers;
    for (int l = r.first; l < r.end; ++l) layers.push_back(l);
    StageSpec spec;
    spec.segments = segments_of(model, layers);
    graph.push_back(spec);
  }
  return graph;
}

std::vector<Segment> segments_of(const Model& model, const std::vector<int>& layers) {
  std::vector<Segment> out;
  for (int l : layers) {
    const ModuleId module = model.module_of(l);
    if (out.empty() || out.back().module != module || out.back().end != l)
      out.push_back({.module = module, .first = l, .end = l + 1});
    else
      ++out.back().end;
  }
  return out;
}

std::vector<int> stages_downstream(const Model& model, const StageGraph& graph) {
  const int stages = graph.ssize();
  const LayerGraph layers(model);
  PerLayer<StageId> stage_of(model.num_layers());
  for (const StageId s : graph.ids()) {
    for (const Segment& seg : graph[s].segments)
      std::ranges::fill(layer_slice(stage_of, seg.first, seg.end), s);
  }
  // Stage edges s -> t wherever a layer on s feeds a layer on t; longest path by
  // relaxation (the stage graph of a DAG model is a DAG).
  PerStage<std::vector<StageId>> next(stages);
  for (int l = 0; const StageId a : stage_of) {
    for (int c : layers.consumers(l)) {
      const StageId b = stage_of[LayerId{c}];
      if (a != b) next[a].push_back(b);
    }
    ++l;
  }
  PerStage<int> depth(stages, 0);
  for (int round = 0; round < stages; ++round) {
    bool changed = false;
    for (const StageId s : graph.ids()) {
      for (const StageId t : next[s]) {
        if (depth[t] + 1 > depth[s]) {
          depth[s] = depth[t] + 1;
          changed = true;
        }
      }
    }
    if (!changed) break;
  }
  return {depth.begin(), depth.end()};
}

StageOrders one_f_one_b_orders(const std::vector<int>& warmup, int microbatches) {
  const int m = microbatches;
  StageOrders orders(isize(warmup));
  for (const StageId s : orders.ids()) {
    auto& order = orders[s];
    const int w = std::min(warmup[s.slot()], m);
    MicrobatchId next_f{0};
    MicrobatchId next_b{0};
    for (; next_f < MicrobatchId{w}; ++next_f) order.push_back({Pass::kF, next_f});
    while (next_f < MicrobatchId{m}) {
      order.push_back({Pass::kF, next_f});
      ++next_f;
      order.push_back({Pass::kB, next_b});
      ++next_b;
    }
    for (; next_b < MicrobatchId{m}; ++next_b) order.push_back({Pass::kB, next_b});
  }
  return orders;
}

void require_single_layout(const SchedulingProblem& problem, const char* scheduler_name) {
  if (!problem.parallel.module_layouts.empty()) {
    throw InputError("parallel.modules: scheduler '" + std::string(scheduler_name) +
                     "' runs the single layout parallel.pp/dp/tp; per-module layouts are "
                     "for the per-module schedulers (see loom schedulers)");
  }
}

}  // namespace loom
