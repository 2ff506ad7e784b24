// The lowering driver: runs the named passes of lowering.hpp in order.
#include "schedulers/lowering/lowering.hpp"

#include "core/errors.hpp"
#include "core/index.hpp"
#include "schedulers/lowering/passes.hpp"

namespace loom {

Schedule lower(const SchedulingProblem& problem, const char* scheduler_name,
               const PipelinePrograms& programs, LoweringCosts costs) {
  if (programs.sharded() && problem.parallel.cp > 1)
    throw InputError(std::string("parallel.cp: ") + scheduler_name +
                     " gives each module a layout of its own (per-module layouts), where context "
                     "parallelism is each module's: set cp in [parallel.modules.<module>] tables "
                     "instead, or pick a single-layout scheduler");
  if (programs.sharded() && problem.parallel.ep > 1)
    throw InputError(std::string("parallel.ep: ") + scheduler_name +
                     " gives each module a layout of its own (per-module layouts), which do not "
                     "shard experts: set parallel.ep = 1 or pick a single-layout scheduler");
  if (problem.parallel.ep > 1 && programs.replicas.size() > 1) {
    // An expert-parallel group's members meet at every MoE layer's all-to-alls in program
    // order, so they must run the same orders.
    for (const RankOrders& orders : programs.replicas) {
      if (!(orders == programs.replicas.front()))
        throw InputError(std::string("parallel.ep: ") + scheduler_name +
                         " orders each replica's work its own way, and expert-parallel ranks "
                         "of different replicas must meet at every MoE layer's all-to-all in "
                         "the same order: set parallel.ep = 1 or pick another scheduler");
    }
  }
  lowering::Context ctx(problem, programs, costs);
  Schedule schedule;
  schedule.scheduler = scheduler_name;
  lowering::place_ranks(ctx, schedule);
  lowering::assign_samples(ctx, schedule);
  lowering::cost_microbatches(ctx, schedule);
  lowering::expand_actions(ctx, schedule);
  lowering::add_point_to_point(ctx, schedule);
  lowering::add_parameter_gathers(ctx, schedule);
  lowering::add_gradient_allreduce(ctx, schedule);
  lowering::add_optimizer_step(ctx, schedule);
  lowering::fill_static_memory(ctx, schedule);
  return schedule;
}

PipelinePrograms one_stage_per_rank(StageGraph stages, const StageOrders& orders) {
  PipelinePrograms programs{.stages = std::move(stages),
                            .ranks = isize(orders),
                            .stage_rank = {},
                            .replicas = {RankOrders(isize(orders))}};
  for (const PipelineRank r : programs.rank_ids()) {  // rank r runs stage r
    const StageId s{r.value()};
    for (const StageAction& a : orders[s])
      programs.replicas.front()[r].push_back(
          {.stage = s, .pass = a.pass, .microbatch = a.microbatch});
  }
  return programs;
}

Schedule lower_stage_graph(const SchedulingProblem& problem, const char* scheduler_name,
                           const StageGraph& graph, const StageOrders& orders,
                           LoweringCosts costs) {
  return lower(problem, scheduler_name, one_stage_per_rank(graph, orders), costs);
}

Schedule lower_virtual_stages(const SchedulingProblem& problem, const char* scheduler_name,
                              const StageGraph& graph, const RankOrders& orders,
                              LoweringCosts costs) {
  const PipelinePrograms programs{
      .stages = graph, .ranks = isize(orders), .stage_rank = {}, .replicas = {orders}};
  return lower(problem, scheduler_name, programs, costs);
}

StageGraph pipeline_stage_graph(const SchedulingProblem& problem, const char* scheduler_name,
                                int stages) {
  require_single_layout(problem, scheduler_name);
  return chain_stages(*problem.model,
                      stages > 0 ? plan_stages(problem, stages) : plan_stages(problem));
}

Schedule lower_pipeline(const SchedulingProblem& problem, const char* scheduler_name,
                        const StageOrders& orders) {
  return lower_stage_graph(problem, scheduler_name, pipeline_stage_graph(problem, scheduler_name),
                           orders);
}

Schedule lower_virtual_pipeline(const SchedulingProblem& problem, const char* scheduler_name,
                                const RankOrders& orders, int chunks) {
  require_single_layout(problem, scheduler_name);
  const int stages = problem.parallel.pp * chunks;
  const StageGraph graph = chain_stages(*problem.model, plan_stages(problem, stages));
  return lower_virtual_stages(problem, scheduler_name, graph, orders);
}

}  // namespace loom
