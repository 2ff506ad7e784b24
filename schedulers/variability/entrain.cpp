// Entrain (dissertation ch. 4): Algorithm 4's assignment lowered onto disaggregated
// encoder / LLM stages with split backward and eager forward (§4.5.3).
//
//   encoder stage  F0 F1 F2 F3 ........ B0  B1' ..      B1' = M^enc_1 \ D_0  u  D_0's
//   LLM stages        F0 F1 F2 ...   B0  B1 ..          encoder backward after LLM B1
//          (0 = ol_0 defers D_0 to 1 = ul_0: LLM F1 runs M^enc_1 u D_0)
#include "schedulers/variability/entrain.hpp"

#include <algorithm>

#include "core/errors.hpp"
#include "core/index.hpp"
#include "core/validate.hpp"
#include "core/workload_cost.hpp"
#include "schedulers/multimodal/fused_encoders.hpp"

namespace loom {
namespace {

constexpr const char* kName = "entrain";

/// E minimizing the slowest stage under the batch's macroscopic per-layer costs (§4.4.3's
/// balance between the encoder and LLM pipelines; ties: fewer encoder stages).
int balanced_split(const Model& model, const Branches& b, const std::vector<double>& costs, int p) {
  const std::optional<int> e = balanced_encoder_stages(model, b, costs, p);
  if (!e)
    throw InputError("parallel.pp: " + std::to_string(p) +
                     " stages cannot hold the encoders and the LLM of 'entrain' (too few "
                     "layers); schedule.entrain.encoder_stages = 0 runs the encoders on the "
                     "LLM's first stage");
  return *e;
}

/// The samples of the iteration: dp x microbatches x microbatch_size (as every scheduler).
std::vector<Sample> iteration_samples(const SchedulingProblem& problem) {
  const int n =
      problem.parallel.dp * problem.schedule.microbatches * problem.schedule.microbatch_size;
  if (isize(problem.samples) < n)
    throw InputError(
        "workload: the iteration needs dp x microbatches x microbatch_size = " + std::to_string(n) +
        " samples but the workload has " + std::to_string(problem.samples.size()));
  return {problem.samples.begin(), problem.samples.begin() + n};
}

/// The lowering costs every op on M^LLM_j (the assignment); the encoders' forwards and the
/// activations they pass between encoder stages run on M^enc_j instead.
void cost_encoder_forwards(Schedule& schedule, const SchedulingProblem& q, const EntrainPlan& plan,
                           const PerLayer<bool>& is_llm) {
  const Model& model = *q.model;
  auto enc_set = [&](RankId rank, MicrobatchId mb) {
    const DeferralPlan& replica = plan.assignment.replicas[schedule.ranks[rank].replica];
    return sample_batch(q.samples, replica.encoder[mb.slot()]);
  };
  for (const RankId r : schedule.rank_ids()) {
    const int tp = schedule.ranks[r].tp;
    for (Op& op : schedule.programs[r]) {
      if (auto* c = std::get_if<Compute>(&op);
          c && c->pass == Pass::kF && !is_llm[LayerId{c->first_layer}]) {
        const auto batch = enc_set(r, c->microbatch);
        c->seconds = 0;
        for (int l = c->first_layer; l < c->end_layer; ++l)
          c->seconds +=
              effective_cost(*q.cost, model, l, layer_shape(model, l, batch), tp).forward_s;
      }
      auto fix_message = [&](MessageTag& tag, double& bytes) {
        if (tag.pass != Pass::kF || is_llm[LayerId{tag.boundary_layer}]) return;
        bytes = q.cost->output_bytes(
            tag.producer(), layer_shape(model, tag.producer(), enc_set(r, tag.microbatch)));
      };
      if (auto* s = std::get_if<Send>(&op)) fix_message(s->tag, s->bytes);
      if (auto* v = std::get_if<Recv>(&op)) fix_message(v->tag, v->bytes);
    }
  }
}

Schedule lower_plan(const SchedulingProblem& problem, const EntrainPlan& plan,
                    const std::vector<Sample>& samples, const std::vector<int>& warmup) {
  const EntrainOptions options = entrain_options().read(problem.schedule, kName);
  SchedulingProblem q = problem;
  q.samples = samples;
  q.schedule.microbatches = plan.assignment.k_eff;
  q.assignment.clear();
  for (const DeferralPlan& r : plan.assignment.replicas) q.assignment.emplace_back(r.llm);
  const int p = isize(plan.graph);
  std::vector<int> lag;  // per stage
  for (const int downstream : stages_downstream(*problem.model, plan.graph))
    lag.push_back(p - 1 - downstream);
  Schedule schedule = lower_stage_graph(
      q, kName, plan.graph,
      entrain_orders(warmup, lag, q.schedule.microbatches, options.pipeline == "zb"));
  PerLayer<bool> is_llm(problem.model->num_layers(), false);
  for (int l : split_branches(*problem.model, kName).llm) is_llm[LayerId{l}] = true;
  cost_encoder_forwards(schedule, q, plan, is_llm);
  return schedule;
}

bool fits(const Schedule& schedule, const Cluster& cluster) {
  try {
    check_fits_memory(schedule, cluster.gpu.memory_bytes);
    return true;
  } catch (const InfeasibleError&) {
    return false;
  }
}

}  // namespace

PerSample<SampleWork> entrain_sample_work(const SchedulingProblem& problem) {
  const Model& model = *problem.model;
  const auto components = model_components(model);
  PerSample<SampleWork> work;
  for (const Sample& s : problem.samples) {
    const auto w =
        sample_component_workload(model, *problem.cost, components, s, problem.parallel.tp);
    SampleWork sw;
    for (size_t c = 0; c + 1 < w.size(); ++c) sw.encoder += w[c];  // encoders: all but the LLM
    sw.llm = w.empty() ? 0 : w.back();
    work.push_back(sw);
  }
  return work;
}

StageOrders entrain_orders(const std::vector<int>& warmup, const std::vector<int>& w_lag,
                           int microbatches, bool zero_bubble) {
  StageOrders orders = one_f_one_b_orders(warmup, microbatches);
  if (!zero_bubble) return orders;
  for (const StageId s : orders.ids()) {
    std::vector<StageAction> split;
    MicrobatchId next_w{0};
    int issued_i = 0;
    for (const StageAction& a : orders[s]) {
      if (a.pass != Pass::kB) {
        split.push_back(a);
        continue;
      }
      split.push_back({Pass::kI, a.microbatch});
      // ZB-H1: W trails its I so the next I (on the critical path) is not delayed.
      if (++issued_i > w_lag[s.slot()]) {
        split.push_back({Pass::kW, next_w});
        ++next_w;
      }
    }
    for (; next_w < MicrobatchId{microbatches}; ++next_w) split.push_back({Pass::kW, next_w});
    orders[s] = std::move(split);
  }
  return orders;
}

EntrainPlan plan_entrain(const SchedulingProblem& problem) {
  require_single_layout(problem, kName);  // E encoder + L LLM stages of parallel.pp
  if (problem.parallel.cp > 1)
    throw InputError(std::string("parallel.cp: '") + kName +
                     "' prices its encoders' forwards on the samples it defers to them (§4.4), "
                     "which the context-parallel split of each layer does not follow yet; "
                     "remove parallel.cp or pick another scheduler");
  const Model& model = *problem.model;
  const Branches branches = split_branches(model, kName);
  const int p = problem.parallel.pp;
  const EntrainOptions options = entrain_options().read(problem.schedule, kName);
  if (p < 2 && !options.encoder_stages)
    throw InputError(std::string("parallel.pp: '") + kName +
                     "' gives the encoders stages of their own and needs at least 2; "
                     "schedule.entrain.encoder_stages = 0 runs them on the LLM's first stage");
  SchedulingProblem q = problem;
  q.samples = iteration_samples(problem);
  EntrainPlan plan;
  plan.work = entrain_sample_work(q);
  // Macroscopic per-layer costs: the whole global batch as one shape (§4.4: the batch-level
  // ratio, not one microbatch's).
  std::vector<const Sample*> all;
  for (const Sample& s : q.samples) all.push_back(&s);
  const auto costs = layer_costs(model, *q.cost, q.schedule.partition_view, all, q.parallel.tp);
  if (options.encoder_stages && *options.encoder_stages >= p)
    throw InputError("schedule.entrain.encoder_stages: " + std::to_string(*options.encoder_stages) +
                     " leaves no stage for the LLM (parallel.pp = " + std::to_string(p) +
                     "); 0 runs the encoders on the LLM's first stage");
  plan.encoder_stages =
      options.encoder_stages ? *options.encoder_stages : balanced_split(model, branches, costs, p);
  // Stage k of the first E holds piece k of every encoder branch (the unified encoder of
  // §4.5); the LLM takes the other pp - E stages. E = 0 (Loom's, for small encoders): the
  // unified encoder runs on the LLM's first stage, ahead of its first piece.
  plan.graph =
      fused_encoder_graph(model, branches, costs, p, plan.encoder_stages, "encoder stages");
  plan.warmup = stages_downstream(model, plan.graph);
  const int k = problem.schedule.microbatches;
  auto assign = [&](int k_min) {
    DeferralOptions deferral;
    deferral.defer = options.defer;
    deferral.min_microbatches = k_min;
    return entrain_assign(plan.work, problem.parallel.dp, k, deferral);
  };
  plan.assignment = assign(p);  // K_eff >= pipeline depth (effective_microbatches())
  // Memory guard (Loom's): fewer, larger microbatches hold more activations per microbatch;
  // if plain 1F1B does not fit at K_eff, take the smallest K' in (K_eff, K] that does.
  if (plan.assignment.k_eff < k &&
      !fits(lower_plan(problem, plan, q.samples, plan.warmup), *problem.cluster)) {
    int lo = plan.assignment.k_eff + 1, hi = k;
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      plan.assignment = assign(mid);
      if (fits(lower_plan(problem, plan, q.samples, plan.warmup), *problem.cluster))
        hi = mid;
      else
        lo = mid + 1;
    }
    plan.assignment = assign(lo);
  }
  return plan;
}

const OptionSet<EntrainOptions>& entrain_options() {
  static const std::string help = encoder_stages_help(
      "pipeline stages of the fused encoders (Table 4.1's E.PP)", "the balanced split, E >= 1");
  static const OptionSet<EntrainOptions> kOptions{
      {"encoder_stages", &EntrainOptions::encoder_stages, help.c_str(), at_least(0)},
      {"pipeline", &EntrainOptions::pipeline,
       "\"1f1b\" keeps each backward fused; \"zb\" splits it into I and W (zero-bubble "
       "H1-style, §4.5.3)",
       one_of({"1f1b", "zb"}).formerly("entrain_pipeline")},
      {"defer", &EntrainOptions::defer,
       "pairwise deferral of Algorithm 4 (false: stratified assignment only)",
       formerly("entrain_defer")},
      {"eager", &EntrainOptions::eager, "eager forward (§4.5.3): warm-ups as long as memory allows",
       formerly("entrain_eager")},
  };
  return kOptions;
}

std::vector<OptionSpec> entrain_scheduler_options() {
  return entrain_options().specs();
}

Schedule generate_entrain(const SchedulingProblem& problem) {
  EntrainPlan plan = plan_entrain(problem);
  const std::vector<Sample> samples = iteration_samples(problem);
  const int m = plan.assignment.k_eff;
  auto with_extra = [&](int extra) {
    std::vector<int> w = plan.warmup;
    for (int& x : w) x = std::min(m, x + extra);
    return w;
  };
  Schedule best = lower_plan(problem, plan, samples, with_extra(0));
  if (!entrain_options().read(problem.schedule, kName).eager || !fits(best, *problem.cluster))
    return best;
  // Eager forward (§4.5.3): the most extra warm-up forwards that still fit in memory
  // (peak activations grow with the warm-up, so fitting is monotone: binary search).
  int lo = 0, hi = m;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    Schedule s = lower_plan(problem, plan, samples, with_extra(mid));
    if (fits(s, *problem.cluster)) {
      lo = mid;
      best = std::move(s);
    } else {
      hi = mid - 1;
    }
  }
  return best;
}

}  // namespace loom
