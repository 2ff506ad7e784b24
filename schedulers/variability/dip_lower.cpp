// DIP-like: the iteration's task DAG (F and B of every chunk for every microbatch), the
// search, and the per-rank task orders it chooses, handed to the shared lowering
// (schedulers/lowering/lowering.hpp) with chunk x as stage x on its rank. The greedy
// timeline the orders come from is an execution in which every message a task needs has
// been sent, and the lowering receives each channel in its send order, so the lowered
// schedule cannot deadlock.

#include "core/errors.hpp"
#include "core/index.hpp"
#include "schedulers/lowering/passes.hpp"
#include "schedulers/variability/dip.hpp"

namespace loom {
namespace {

/// The chunks as the lowering's stages, each on its rank.
PipelinePrograms dip_programs(const DipLayout& layout) {
  PipelinePrograms programs{.stages = {}, .ranks = layout.ranks, .stage_rank = {}, .replicas = {}};
  for (const DipChunk& chunk : layout.chunks) {
    StageSpec stage;
    stage.segments = chunk.segments;
    programs.stages.push_back(std::move(stage));
    programs.stage_rank.push_back(chunk.rank);
  }
  return programs;
}

/// Task t = (mb * chunks + chunk) * 2 + (0 forward | 1 backward), costed as the lowering
/// costs it.
DipTasks dip_tasks(const lowering::Context& ctx, const DipLayout& layout, int d) {
  const int nc = layout.chunks.ssize();
  const int m = ctx.microbatches;
  DipTasks out(m * nc * 2);
  auto id = [&](MicrobatchId j, StageId x, bool fwd) {
    return DipTaskId{(j.value() * nc + x.value()) * 2 + (fwd ? 0 : 1)};
  };
  for (const MicrobatchId j : IdRange<MicrobatchId>(m)) {
    const lowering::MicrobatchCosts& mc = ctx.cost(d, j);
    for (const StageId x : layout.chunks.ids()) {
      const DipChunk& chunk = layout.chunks[x];
      DipTask& f = out[id(j, x, true)];
      DipTask& b = out[id(j, x, false)];
      f = {.chunk = x,
           .microbatch = j,
           .forward = true,
           .seconds = 0,
           .activation_bytes = 0,
           .deps = {}};
      b = {.chunk = x,
           .microbatch = j,
           .forward = false,
           .seconds = 0,
           .activation_bytes = 0,
           .deps = {id(j, x, true)}};
      for (const Segment& seg : chunk.segments) {
        for (const PassCost& layer : layer_slice(mc.layer, seg.first, seg.end)) {
          f.seconds += layer.forward_s;
          b.seconds += layer.backward_s();
        }
        if (ctx.needs_backward(seg))
          for (const double bytes : layer_slice(mc.activation, seg.first, seg.end))
            f.activation_bytes += bytes;
      }
      b.activation_bytes = f.activation_bytes;
      for (const StageId y : chunk.producers) f.deps.push_back(id(j, y, true));
      for (const StageId y : chunk.gradients) b.deps.push_back(id(j, y, false));
    }
  }
  return out;
}

}  // namespace

Schedule dip_schedule(const SchedulingProblem& problem, DipSearchStats* stats) {
  if (!problem.parallel.module_layouts.empty())
    throw InputError(
        "parallel.modules: dip colocates every modality on parallel.pp ranks; "
        "per-module layouts are for cornstarch and hetero-*");
  const DipLayout layout = dip_layout(problem);
  PipelinePrograms programs = dip_programs(layout);
  // The planner's view of the iteration: the lowering's own placement checks and costs.
  lowering::Context ctx(problem, programs, LoweringCosts::kTrue);
  Schedule planned;
  lowering::place_ranks(ctx, planned);
  lowering::assign_samples(ctx, planned);
  lowering::cost_microbatches(ctx, planned);
  const int dp = problem.parallel.dp, m = problem.schedule.microbatches;
  std::vector<DipTasks> replicas;
  for (int d = 0; d < dp; ++d) replicas.push_back(dip_tasks(ctx, layout, d));
  PerPipelineRank<double> static_bytes;
  for (const StaticMemory& mem : static_memory_per_rank(problem, programs))
    static_bytes.push_back(mem.total());
  const DipOptions o = dip_options().read(problem.schedule, "dip");
  const double cap =
      o.memory_cap_gb > 0 ? o.memory_cap_gb * 1e9 : problem.cluster->gpu.memory_bytes;
  const int modalities = isize(layout.k);
  const PerDipUnit<double> unit_pos =
      dip_search(replicas, layout, m, modalities, static_bytes, cap, o.search_iterations,
                 o.search_budget_s, static_cast<std::uint64_t>(o.seed), stats);
  for (const DipTasks& tasks : replicas) {
    const DipOrder order = dip_greedy(tasks, layout.chunks, layout.ranks, static_bytes, cap,
                                      dip_priorities(tasks, layout, unit_pos));
    RankOrders orders(layout.ranks);
    for (const PipelineRank r : order.per_rank.ids()) {
      for (const DipTaskId t : order.per_rank[r]) {
        const DipTask& task = tasks[t];
        orders[r].push_back({.stage = task.chunk,
                             .pass = task.forward ? Pass::kF : Pass::kB,
                             .microbatch = task.microbatch});
      }
    }
    programs.replicas.push_back(std::move(orders));
  }
  return lower(problem, "dip", programs);
}

const OptionSet<DipOptions>& dip_options() {
  static const OptionSet<DipOptions> kOptions{
      {"seed", &DipOptions::seed, "seed of the MCTS rollouts", at_least(0).formerly("dip_seed")},
      {"search_iterations", &DipOptions::search_iterations,
       "MCTS iterations over the segment order (deterministic for a seed); 0 runs the root "
       "order unsearched, every encoder unit before any LLM unit (Fig 4.2c), as the "
       "dissertation's DIP ran (§4.7.2)",
       at_least(0).formerly("dip_search_iterations")},
      {"search_budget_s", &DipOptions::search_budget_s,
       "wall-clock cap on the search, s (generous: the iteration budget binds, so outputs "
       "are byte-identical)",
       at_least(0).formerly("dip_search_budget_s")},
      {"memory_cap_gb", &DipOptions::memory_cap_gb,
       "per-rank memory cap of the greedy interleaving, GB; 0 = the GPU's memory",
       at_least(0).formerly("dip_memory_cap_gb")},
  };
  return kOptions;
}

std::vector<OptionSpec> dip_scheduler_options() {
  return dip_options().specs();
}

Schedule generate_dip(const SchedulingProblem& problem) {
  return dip_schedule(problem, nullptr);
}

}  // namespace loom
