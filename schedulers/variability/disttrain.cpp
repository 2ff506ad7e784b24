// DistTrain-like (baseline-schedules.md §4, mostly secondhand [2nd]; dissertation §4.2.1
// Fig 4.2b, §4.7.2): disaggregated model orchestration, i.e. the encoders and the LLM
// backbone on disjoint rank sets chained into one pipeline, 1F1B across the chain, and
// disaggregated data preprocessing that reorders samples within and between microbatches.
//
//   encoder stages e0 .. ──> LLM stages l0 l1 ..      (own GPUs each, as cornstarch's
//                                                      non-colocated modality parallelism)
//
// Planner (dissertation §4.7.2, Table 4.1): DistTrain profiles a single sample to size
// its components. For each LLM stage count i the encoders get the fewest stages whose
// Eq 3.5 bottleneck (one-sample costs) is at most the LLM's; the allocation with the
// least (m + depth - 1) x bottleneck wins (reconstructed: the paper's cost formula is
// not public). `[schedule.disttrain] encoder_stages` overrides the planner: E >= 1 stages
// for every encoder branch, or 0 for the encoders on the LLM's first stage
// (Megatron-Core's encoder_pipeline_model_parallel_size = 0), the reordering kept. The
// planner ("auto") never picks 0: disaggregation is what DistTrain is.
#include "schedulers/variability/disttrain.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <numeric>
#include <optional>

#include "core/errors.hpp"
#include "core/index.hpp"
#include "schedulers/multimodal/fused_encoders.hpp"

namespace loom {

PerSample<ModalityWork> sample_work(const SchedulingProblem& problem, const Branches& branches) {
  const Model& model = *problem.model;
  PerLayer<char> encoder_side(model.num_layers(), 0);
  for (const auto& layers : branches.encoders)
    for (int l : layers) encoder_side[LayerId{l}] = 1;
  PerSample<ModalityWork> out;
  for (const Sample& sample : problem.samples) {
    ModalityWork w;
    const std::vector<const Sample*> one = {&sample};
    for (const LayerId l : encoder_side.ids()) {
      const PassCost c = effective_cost(*problem.cost, model, l.value(),
                                        layer_shape(model, l.value(), one), problem.parallel.tp);
      const double t = c.forward_s + c.backward_s();
      (encoder_side[l] ? w.encoder_s : w.llm_s) += t;
    }
    out.push_back(w);
  }
  return out;
}

SampleAssignment intra_microbatch_lpt(const PerSample<ModalityWork>& work, int dp, int microbatches,
                                      int microbatch_size) {
  SampleAssignment out(dp);
  const int group = dp * microbatch_size;
  for (int j = 0; j < microbatches; ++j) {
    std::vector<SampleId> ids;  // global microbatch j's samples
    for (int k = 0; k < group; ++k) ids.push_back(SampleId{j * group + k});
    // LPT: longest encoder work first, to the least-loaded replica with room (stable
    // tie-breaks keep it deterministic).
    std::stable_sort(ids.begin(), ids.end(),
                     [&](SampleId a, SampleId b) { return work[a].encoder_s > work[b].encoder_s; });
    PerReplica<std::vector<SampleId>> microbatch(dp);  // replica d's share of microbatch j
    PerReplica<double> load(dp, 0);
    for (const SampleId id : ids) {
      std::optional<ReplicaId> best;
      for (const ReplicaId d : microbatch.ids()) {
        if (isize(microbatch[d]) >= microbatch_size) continue;
        if (!best || load[d] < load[*best]) best = d;
      }
      microbatch[*best].push_back(id);
      load[*best] += work[id].encoder_s;
    }
    for (const ReplicaId d : out.ids()) {
      std::sort(microbatch[d].begin(), microbatch[d].end());
      out[d].push_back(std::move(microbatch[d]));
    }
  }
  return out;
}

std::vector<int> inter_microbatch_order(const std::vector<double>& encoder_stage_s,
                                        const std::vector<double>& llm_stage_s, int tail) {
  struct Microbatch {
    int id = 0;  ///< position in the arrival order
    double encoder_s = 0;
    double llm_s = 0;
  };
  std::vector<Microbatch> by_size;
  for (size_t j = 0; j < encoder_stage_s.size(); ++j)
    by_size.push_back({isize(by_size), encoder_stage_s[j], llm_stage_s[j]});
  std::stable_sort(by_size.begin(), by_size.end(), [](const Microbatch& a, const Microbatch& b) {
    return a.encoder_s + a.llm_s < b.encoder_s + b.llm_s;
  });
  const int m = isize(by_size);
  std::vector<int> order;
  if (m <= 1) {
    for (const Microbatch& mb : by_size) order.push_back(mb.id);
    return order;
  }
  // Smallest first (short warm-up fill); the next `tail` smallest drain the pipeline.
  const int reserved = std::min(tail, m - 1);
  order.push_back(by_size.front().id);
  double period = by_size.front().llm_s;  // the backbone time of the last one placed
  std::vector<Microbatch> rest(by_size.begin() + 1 + reserved, by_size.end());
  std::vector<Microbatch> cool(by_size.begin() + 1, by_size.begin() + 1 + reserved);
  // Middle: best fit. In the 1F1B steady state the encoder forwards the next microbatch
  // while the backbone works on the previous one; the closest fit idles neither.
  while (!rest.empty()) {
    auto best =
        std::min_element(rest.begin(), rest.end(), [&](const Microbatch& a, const Microbatch& b) {
          return std::abs(a.encoder_s - period) < std::abs(b.encoder_s - period);
        });
    order.push_back(best->id);
    period = best->llm_s;
    rest.erase(best);
  }
  // The reserved ones run last, largest of them first so the drain shrinks.
  std::reverse(cool.begin(), cool.end());
  for (const Microbatch& mb : cool) order.push_back(mb.id);
  return order;
}

namespace {

struct Allocation {
  int llm = 1;
  std::vector<int> encoders;
  double estimate = std::numeric_limits<double>::infinity();
};

/// The one option, `encoder_stages`, in the struct encoders-colocated declares it with.
const OptionSet<EncoderStagesOptions>& disttrain_options() {
  static const std::string help =
      encoder_stages_help("pipeline stages of each encoder branch",
                          "DistTrain's planner, which always disaggregates (E >= 1)");
  static const OptionSet<EncoderStagesOptions> kOptions{
      {"encoder_stages", &EncoderStagesOptions::encoder_stages, help.c_str(), at_least(0)},
  };
  return kOptions;
}

/// The allocation `encoder_stages` asks for: E stages per encoder branch, the LLM the rest.
Allocation fixed_allocation(const SchedulingProblem& problem, const Branches& branches, int e) {
  const int nb = isize(branches.encoders);
  const int llm = problem.parallel.pp - nb * e;
  if (llm < 1)
    throw InputError("schedule.disttrain.encoder_stages: " + std::to_string(e) + " stages for " +
                     std::to_string(nb) + " encoder(s) leave the LLM none of parallel.pp = " +
                     std::to_string(problem.parallel.pp) +
                     "; 0 runs the encoders on the LLM's first stage");
  return Allocation{llm, std::vector<int>(static_cast<size_t>(nb), e), 0};
}

/// The DistTrain-like planner on one-sample costs (see the file comment).
Allocation plan_allocation(const SchedulingProblem& problem, const Branches& branches,
                           const std::vector<double>& costs) {
  const int budget = problem.parallel.pp;
  const int nb = isize(branches.encoders);
  Allocation best;
  for (int i = 1; i <= budget - nb && i <= isize(branches.llm); ++i) {
    Allocation a{i, {}, 0};
    double bottleneck = branch_bottleneck(branches.llm, costs, i);
    int used = i, depth = 0;
    for (const auto& layers : branches.encoders) {
      int k = 1;
      const double t_i = branch_bottleneck(branches.llm, costs, i);
      while (k < isize(layers) && branch_bottleneck(layers, costs, k) > t_i) ++k;
      a.encoders.push_back(k);
      used += k;
      depth = std::max(depth, k);
      bottleneck = std::max(bottleneck, branch_bottleneck(layers, costs, k));
    }
    if (used > budget) continue;
    a.estimate = (problem.schedule.microbatches + depth + i - 1) * bottleneck;
    if (a.estimate < best.estimate) best = a;
  }
  if (best.encoders.empty()) {
    throw InputError("parallel.pp: " + std::to_string(budget) +
                     " stages cannot give the encoder(s) and the LLM backbone stages of their "
                     "own (disttrain disaggregates them); raise parallel.pp");
  }
  return best;
}

}  // namespace

Schedule disttrain_schedule(const SchedulingProblem& problem, bool reorder) {
  const char* name = "disttrain";
  if (!problem.parallel.module_layouts.empty())
    throw InputError(
        "parallel.modules: disttrain plans its own disaggregated layout from "
        "parallel.pp/dp/tp; per-module layouts are for cornstarch and hetero-*");
  const Branches branches = split_branches(*problem.model, name);
  SchedulingProblem one = problem;  // the planner's view: a single sample (Table 4.1)
  one.schedule.microbatch_size = 1;
  const std::vector<double> costs = view_costs(one);
  const std::optional<int> e = disttrain_options().read(problem.schedule, name).encoder_stages;
  const Allocation a =
      e ? fixed_allocation(problem, branches, *e) : plan_allocation(problem, branches, costs);
  const StageGraph graph =
      e == 0 ? fused_encoder_graph(*problem.model, branches, costs, a.llm, 0,
                                   "schedule.disttrain.encoder_stages")
             : disaggregated_graph(*problem.model, branches, costs, a.encoders, a.llm);

  SchedulingProblem out = problem;
  const int dp = problem.parallel.dp, m = problem.schedule.microbatches;
  const int mbs = problem.schedule.microbatch_size;
  if (isize(problem.samples) < dp * m * mbs)
    throw InputError("workload: disttrain needs dp x microbatches x microbatch_size = " +
                     std::to_string(dp * m * mbs) + " samples, the workload has " +
                     std::to_string(problem.samples.size()));
  if (reorder) {
    const PerSample<ModalityWork> work = sample_work(problem, branches);
    out.assignment = intra_microbatch_lpt(work, dp, m, mbs);
    // Encoders on the LLM's first stage (E = 0) count as one encoder stage of that depth.
    const int enc_depth = *std::max_element(a.encoders.begin(), a.encoders.end());
    for (auto& replica : out.assignment) {
      std::vector<double> enc, llm;  // per microbatch, its encoder and LLM stage times
      for (const std::vector<SampleId>& microbatch : replica) {
        double enc_s = 0, llm_s = 0;
        for (const SampleId id : microbatch) {
          const ModalityWork& w = work[id];
          enc_s += w.encoder_s / std::max(enc_depth, 1);
          llm_s += w.llm_s / a.llm;
        }
        enc.push_back(enc_s);
        llm.push_back(llm_s);
      }
      const std::vector<int> order = inter_microbatch_order(enc, llm, enc_depth + a.llm - 1);
      PerMicrobatch<std::vector<SampleId>> reordered;
      for (int j : order) reordered.push_back(replica[MicrobatchId{j}]);
      replica = std::move(reordered);
    }
  }
  const StageOrders orders = one_f_one_b_orders(stages_downstream(*problem.model, graph), m);
  return lower_stage_graph(out, name, graph, orders);
}

Schedule generate_disttrain(const SchedulingProblem& problem) {
  return disttrain_schedule(problem, true);
}

std::vector<OptionSpec> disttrain_scheduler_options() {
  return disttrain_options().specs();
}

}  // namespace loom
