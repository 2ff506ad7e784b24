// `loom cost CONFIG`: why an iteration costs what it does. First the kernels of one layer
// for one microbatch (time, FLOPs, bytes, compute- or memory-bound, achieved TFLOP/s), from
// the kernel-level analytical model; then the iteration on the evaluator, on its busiest
// rank: compute split into GEMM/attention, memory-bound kernels, exposed TP communication
// and recompute; TP communication hidden behind GEMMs; pipeline waits split into bubble
// (the producer still computing) and exposed transfers, plus the transfers hidden behind
// compute; the data-parallel all-reduce split into waiting for slower members and the ring;
// the whole iteration's model TFLOP/s per GPU and MFU (core/model_flops.hpp).
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <variant>

#include "app/study.hpp"
#include "cli/commands.hpp"
#include "core/cost_analytical.hpp"
#include "core/errors.hpp"
#include "core/evaluator.hpp"
#include "core/index.hpp"
#include "core/matching.hpp"

namespace loom {
namespace {

struct Options {
  std::string config;
  std::vector<std::string> overrides;
  int layer = -1;  ///< global layer index; -1 = the first layer of the last module
  bool json = false;
};

/// Seconds of one microbatch over all layers, by what the time is spent on.
struct Shares {
  double compute = 0;  ///< GEMMs and fused attention
  double memory = 0;
  double tp_exposed = 0;  ///< TP communication on the critical path
  double tp_hidden = 0;   ///< behind the pass's GEMMs (cost.tp_comm_overlap)
  double recompute = 0;
  /// What the rank is busy for: hidden TP communication takes no time of its own.
  double total() const { return compute + memory + tp_exposed + recompute; }
};

/// The busiest rank's time outside its computes, from the evaluator's timeline.
struct Waits {
  double pp_bubble = 0;   ///< at a receive, before the producer sent
  double pp_exposed = 0;  ///< at a receive, while the message was on the wire
  double pp_hidden = 0;   ///< transfer time of received messages that overlapped compute
  double dp_wait = 0;     ///< at an all-reduce or the optimizer step, for slower members
  /// At a reduction across the pipeline (the tied embedding's: first and last stage of one
  /// replica), for the other stage to finish its backward; not a data-parallel wait.
  double cross_stage_wait = 0;
  double dp_ring = 0;           ///< a blocking all-reduce itself (after the last backward)
  double dp_async_exposed = 0;  ///< waiting at the optimizer step for async buckets
  double dp_async_hidden = 0;   ///< async bucket time behind the rank's other work
  double optimizer = 0;         ///< the optimizer step (busy time, not a wait)
  double fsdp_gather = 0;       ///< FSDP's parameter all-gathers on the comm stream
  double fsdp_exposed = 0;      ///< computes waiting for their layer's gather
  /// Context parallelism's K/V exchange (parallel.cp): waiting for the previous CP rank to
  /// reach its step, transfer time on the critical path, and transfer time behind the
  /// attention blocks (ring messages), or the exchange's collectives (all-gather form).
  double cp_wait = 0, cp_exposed = 0, cp_hidden = 0;
  /// Expert parallelism's dispatch and combine all-to-alls (parallel.ep): waiting for the
  /// group's slower members, and the all-to-alls themselves (blocking: all exposed).
  double ep_wait = 0, ep_exposed = 0;
  double ep_async = 0;          ///< an overlapped pair's all-to-alls, on the comm stream...
  double ep_async_exposed = 0;  ///< ... and the waits of the computes that need them
};

/// Splits every receive and collective of `rank` by what it waited for.
Waits rank_waits(const Schedule& schedule, const Timeline& timeline, RankId rank) {
  const Matching matching = match_operations(schedule);
  auto timing = [&](OpRef ref) { return timeline.at(ref); };
  Waits w;
  const auto& ops = schedule.programs[rank];
  std::vector<OpTiming> pending;  // async buckets (ring start to end) not yet waited for
  double rank_end = 0;            // when the rank's own work so far ended
  // The rank idles from its own work's end until `until` (its optimizer step, or its
  // program's end) waiting for its async buckets: the rings that run in that gap are
  // exposed, the rest of the gap is waiting for slower members; ring time before it hid
  // behind the rank's work.
  auto settle_async = [&](double until) {
    double covered = 0, ring = 0;
    for (const OpTiming& b : pending) {
      ring += b.end_s - b.start_s;
      covered += std::max(0.0, std::min(b.end_s, until) - std::max(b.start_s, rank_end));
    }
    w.dp_async_exposed += covered;
    w.dp_wait += std::max(0.0, until - rank_end - covered);
    w.dp_async_hidden += ring - covered;
    pending.clear();
  };
  // Expert parallelism and FSDP do not go together: a compute that waits waits for one kind.
  const bool schedule_has_all_to_all = std::any_of(ops.begin(), ops.end(), is_all_to_all);
  for (std::size_t i = 0; const Op& op : ops) {
    const OpRef ref{rank, i++};
    const OpTiming t = timing(ref);
    if (const auto* c = std::get_if<Collective>(&op); c && c->async) {
      // FSDP's prefetched gathers are waited for by the computes; its reduce-scatters,
      // like gradient buckets, by the optimizer step. An overlapped pair's all-to-alls by
      // the half's next compute.
      if (c->kind == CollectiveKind::kAllToAll)
        w.ep_async += t.end_s - t.start_s;
      else if (c->kind == CollectiveKind::kAllGather)
        w.fsdp_gather += t.end_s - t.start_s;
      else
        pending.push_back(t);
      continue;
    }
    if (const auto* c = std::get_if<Compute>(&op); c && c->async_pending >= 0)
      (schedule_has_all_to_all ? w.ep_async_exposed : w.fsdp_exposed) +=
          std::max(0.0, t.start_s - rank_end);
    if (std::holds_alternative<OptimizerStep>(op) && !pending.empty()) settle_async(t.start_s);
    if (!std::holds_alternative<Send>(op)) rank_end = std::max(rank_end, t.end_s);
    const auto* coll = std::get_if<Collective>(&op);
    if (const auto* recv = std::get_if<Recv>(&op)) {
      const OpTiming sent = timing(matching.peer_of(ref));
      const double exposed =
          std::max(0.0, std::min(t.end_s, sent.end_s) - std::max(t.start_s, sent.start_s));
      const bool cp = recv->tag.context_parallel();
      (cp ? w.cp_exposed : w.pp_exposed) += exposed;
      (cp ? w.cp_wait : w.pp_bubble) += (t.end_s - t.start_s) - exposed;
      (cp ? w.cp_hidden : w.pp_hidden) += std::max(0.0, (sent.end_s - sent.start_s) - exposed);
    } else if (coll && schedule.cp > 1 && coll->kind != CollectiveKind::kAllReduce &&
               coll->end_layer > coll->first_layer) {
      w.cp_exposed += t.end_s - t.start_s;  // the all-gather form's exchange, blocking
    } else if (coll && coll->kind == CollectiveKind::kAllToAll) {
      double all_arrived = t.start_s;
      for (const OpRef& m : matching.members(matching.instance_of(ref)))
        all_arrived = std::max(all_arrived, timing(m).start_s);
      w.ep_wait += all_arrived - t.start_s;
      w.ep_exposed += t.end_s - all_arrived;
    } else if (coll) {
      double all_arrived = t.start_s;
      std::set<ReplicaId> replicas;
      bool cross_stage = false;  // two members in one replica: a group across its stages
      for (const OpRef& m : matching.members(matching.instance_of(ref))) {
        all_arrived = std::max(all_arrived, timing(m).start_s);
        cross_stage = cross_stage || !replicas.insert(schedule.ranks[m.rank].replica).second;
      }
      (cross_stage ? w.cross_stage_wait : w.dp_wait) += all_arrived - t.start_s;
      w.dp_ring += t.end_s - all_arrived;
    } else if (std::holds_alternative<OptimizerStep>(op)) {
      w.optimizer += t.end_s - t.start_s;
    }
  }
  if (!pending.empty()) {
    double until = rank_end;
    for (const OpTiming& b : pending) until = std::max(until, b.end_s);
    settle_async(until);
  }
  return w;
}

/// One microbatch of the config's synthetic samples, as every layer sees it.
class OneMicrobatch {
 public:
  explicit OneMicrobatch(const Study& s)
      : model_(s.config.model),
        samples_(synthetic_samples(s.config.schedule.microbatch_size, s.config.workload.tokens)) {
    for (const Sample& x : samples_) refs_.push_back(&x);
  }
  MicrobatchShape shape(int layer) const { return layer_shape(model_, layer, refs_); }

 private:
  const Model& model_;
  std::vector<Sample> samples_;
  std::vector<const Sample*> refs_;
};

Shares model_shares(const Study& s, const AnalyticalCostModel& cost) {
  Shares sh;
  const bool overlap = cost.options().tp_comm_overlap;
  const OneMicrobatch microbatch(s);
  for (int l = 0; l < s.config.model.num_layers(); ++l) {
    struct PassTimes {
      double gemm = 0, comm = 0;
    };
    std::map<KernelPass, PassTimes> passes = {
        {KernelPass::kForward, {}}, {KernelPass::kInputGrad, {}}, {KernelPass::kWeightGrad, {}}};
    for (const Kernel& k : cost.kernels(l, microbatch.shape(l), s.config.parallel.tp)) {
      PassTimes& pass = passes.at(k.pass);
      if (k.bound == KernelBound::kCompute) {
        sh.compute += k.seconds;
        pass.gemm += k.seconds;
      } else if (k.bound == KernelBound::kMemory) {
        sh.memory += k.seconds;
      } else {
        pass.comm += k.seconds;
      }
      if (recomputed(k, cost.recompute_of(l), cost.options().recompute_modules))
        sh.recompute += k.seconds;
    }
    // The cost model's overlap rule (cost_analytical.cpp): a pass's TP communication hides
    // behind its GEMMs up to their length.
    for (const auto& [kind, pass] : passes) {  // F, I, W
      const double hidden = overlap ? std::min(pass.comm, pass.gemm) : 0.0;
      sh.tp_hidden += hidden;
      sh.tp_exposed += pass.comm - hidden;
    }
  }
  return sh;
}

/// The busiest rank's iteration on the evaluator, as `loom cost --json` prints it.
nlohmann::json iteration_json(const Study& study, const AnalyticalCostModel* kernels) {
  const Timeline timeline = evaluate(study.schedule, study.config.cluster);
  const Metrics metrics = study_metrics(study, timeline);
  RankId busiest{0};
  for (const RankMetrics& r : metrics.per_rank)
    if (r.busy_s > metrics.per_rank[busiest].busy_s) busiest = r.rank;
  const Waits w = rank_waits(study.schedule, timeline, busiest);
  const double recv_s = w.pp_bubble + w.pp_exposed;
  const double collective_s = w.dp_wait + w.cross_stage_wait + w.dp_ring + w.dp_async_exposed;
  const double busy = metrics.per_rank[busiest].busy_s;
  const double compute = busy - w.optimizer;
  nlohmann::json it = {
      {"iteration_s", metrics.iteration_time_s},
      {"rank", busiest},
      {"compute_s", compute},
      {"optimizer_s", w.optimizer},
      {"pipeline_wait_s", recv_s},
      {"pipeline",
       {{"bubble_s", w.pp_bubble},
        {"exposed_transfer_s", w.pp_exposed},
        {"hidden_transfer_s", w.pp_hidden}}},
      {"dp_allreduce_s", collective_s},
      {"data_parallel",
       {{"wait_for_members_s", w.dp_wait},
        {"wait_for_other_stage_s", w.cross_stage_wait},
        {"exposed_allreduce_s", w.dp_ring + w.dp_async_exposed},
        {"hidden_allreduce_s", w.dp_async_hidden}}},
      {"fsdp",
       {{"gather_s", w.fsdp_gather},
        {"exposed_gather_s", w.fsdp_exposed},
        {"hidden_gather_s", std::max(0.0, w.fsdp_gather - w.fsdp_exposed)}}},
      {"other_idle_s",
       std::max(0.0, metrics.iteration_time_s - busy - recv_s - collective_s - w.fsdp_exposed -
                         w.cp_wait - w.cp_exposed - w.ep_wait - w.ep_exposed - w.ep_async_exposed)},
      {"bubble_fraction", metrics.bubble_fraction}};
  if (study.schedule.cp > 1) {
    it["context_parallel"] = {{"wait_for_ring_s", w.cp_wait},
                              {"exposed_exchange_s", w.cp_exposed},
                              {"hidden_exchange_s", w.cp_hidden}};
  }
  if (study.config.parallel.ep > 1) {
    it["expert_parallel"] = {
        {"wait_for_members_s", w.ep_wait},
        {"exposed_all_to_all_s", w.ep_exposed + w.ep_async_exposed},
        {"hidden_all_to_all_s", std::max(0.0, w.ep_async - w.ep_async_exposed)}};
  }
  const TrainingRates rates = study_rates(study, metrics.iteration_time_s);
  it["tflops_per_gpu"] = rates.tflops_per_gpu;
  it["mfu"] = rates.mfu;
  it["tokens_per_s_per_gpu"] = rates.tokens_per_s_per_gpu;
  if (kernels) {
    // Split the rank's compute in the proportions of one microbatch over the whole model.
    const Shares sh = model_shares(study, *kernels);
    const double scale = sh.total() > 0 ? compute / sh.total() : 0;
    it["compute_split_s"] = {{"gemm_and_attention", sh.compute * scale},
                             {"memory_bound", sh.memory * scale},
                             {"tp_communication", sh.tp_exposed * scale},
                             {"recompute", sh.recompute * scale}};
    it["tp_communication_hidden_s"] = sh.tp_hidden * scale;
  }
  return it;
}

/// The text form of `loom cost`, from its JSON.
void print_cost(const nlohmann::json& j, const std::string& cost_model) {
  if (j.contains("kernels")) {
    std::printf("kernels of layer %d for one microbatch (tp %d, %s):\n", j["layer"].get<int>(),
                j["tp"].get<int>(), j["cost_model"].dump().c_str());
    if (j.contains("cp"))
      std::printf(
          "(the replica's microbatch: each of its cp = %d CP ranks runs the linears over 1/%d "
          "of the tokens, priced at that shape, and 1/%d of the attention; "
          "docs/context-parallelism.md)\n",
          j["cp"].get<int>(), j["cp"].get<int>(), j["cp"].get<int>());
    std::printf("%-40s %4s %-13s %10s %10s %10s %8s\n", "kernel", "pass", "bound", "ms", "GFLOP",
                "MB", "TFLOP/s");
    for (const auto& k : j["kernels"]) {
      const double s = k["seconds"].get<double>();
      const double flops = k["flops"].get<double>();
      std::printf("%-40s %4s %-13s %10.3f %10.2f %10.2f %8.1f\n",
                  k["name"].get<std::string>().c_str(), k["pass"].get<std::string>().c_str(),
                  k["bound"].get<std::string>().c_str(), s * 1e3, flops / 1e9,
                  k["bytes"].get<double>() / 1e6, s > 0 ? flops / s / 1e12 : 0.0);
    }
  } else {
    std::printf(
        "(no kernel list: the %s cost model has no kernels; the kernel-level analytical "
        "model is the default when cost.efficiency is not set)\n",
        cost_model.c_str());
  }
  const auto& it = j["iteration"];
  auto v = [&](const nlohmann::json& x) { return x.get<double>(); };
  std::printf("\niteration on the evaluator: %.3f s; busiest rank %d:\n", v(it["iteration_s"]),
              it["rank"].get<int>());
  std::printf("  compute                 %10.3f s\n", v(it["compute_s"]));
  if (it.contains("compute_split_s")) {
    for (const auto& [name, x] : it["compute_split_s"].items())
      std::printf("    %-21s %10.3f s\n", name.c_str(), v(x));
    std::printf("  TP communication hidden behind GEMMs %.3f s (not in compute)\n",
                v(it["tp_communication_hidden_s"]));
  }
  std::printf("  optimizer step          %10.3f s\n", v(it["optimizer_s"]));
  std::printf("  pipeline waits          %10.3f s\n", v(it["pipeline_wait_s"]));
  std::printf("    bubble (producer still computing) %.3f s\n", v(it["pipeline"]["bubble_s"]));
  std::printf("    exposed transfers     %10.3f s\n", v(it["pipeline"]["exposed_transfer_s"]));
  std::printf("  pipeline transfers hidden behind compute %.3f s\n",
              v(it["pipeline"]["hidden_transfer_s"]));
  if (it.contains("context_parallel")) {
    const auto& cp = it["context_parallel"];
    std::printf(
        "  context-parallel K/V exchange: exposed %.3f s, waiting for the ring %.3f s, "
        "hidden behind attention %.3f s\n",
        v(cp["exposed_exchange_s"]), v(cp["wait_for_ring_s"]), v(cp["hidden_exchange_s"]));
  }
  if (it.contains("expert_parallel")) {
    const auto& ep = it["expert_parallel"];
    std::printf(
        "  expert-parallel all-to-alls (dispatch, combine): exposed %.3f s, waiting for slower "
        "members %.3f s, hidden under the other half of an overlapped pair %.3f s\n",
        v(ep["exposed_all_to_all_s"]), v(ep["wait_for_members_s"]), v(ep["hidden_all_to_all_s"]));
  }
  std::printf(
      "  gradient reductions (data-parallel all-reduce or FSDP reduce-scatter, tied "
      "embedding) %.3f s\n",
      v(it["dp_allreduce_s"]));
  std::printf("    waiting for slower data-parallel members %.3f s\n",
              v(it["data_parallel"]["wait_for_members_s"]));
  std::printf("    waiting for the pipeline's other end (tied embedding) %.3f s\n",
              v(it["data_parallel"]["wait_for_other_stage_s"]));
  std::printf("    exposed (blocking, or buckets still running at the optimizer step) %.3f s\n",
              v(it["data_parallel"]["exposed_allreduce_s"]));
  std::printf(
      "    hidden behind the backward (overlap_grad_reduce buckets, FSDP reduce-scatters) %.3f s\n",
      v(it["data_parallel"]["hidden_allreduce_s"]));
  if (v(it["fsdp"]["gather_s"]) > 0) {
    std::printf("  parameter all-gathers (parallel.fsdp) %.3f s\n", v(it["fsdp"]["gather_s"]));
    std::printf("    exposed (a layer waiting for its parameters) %.3f s\n",
                v(it["fsdp"]["exposed_gather_s"]));
    std::printf("    hidden behind the previous layer's compute %.3f s\n",
                v(it["fsdp"]["hidden_gather_s"]));
  }
  std::printf("  bubble fraction (all ranks) %.1f %%\n", v(it["bubble_fraction"]) * 100);
  std::printf(
      "  model FLOPs (all ranks) %.1f TFLOP/s per GPU, MFU %.1f %%, %.0f tokens/s per GPU\n",
      v(it["tflops_per_gpu"]), v(it["mfu"]) * 100, v(it["tokens_per_s_per_gpu"]));
}

int run_cost(const Options& o) {
  auto study = prepare_study(o.config, o.overrides);
  const Model& model = study->config.model;
  const int layer =
      o.layer >= 0 ? o.layer : model.num_layers() - isize(model.modules().back().layers);
  if (layer >= model.num_layers())
    throw InputError("--layer: " + std::to_string(o.layer) + " is past the model's " +
                     std::to_string(model.num_layers()) + " layers");
  const auto* analytical = dynamic_cast<const AnalyticalCostModel*>(study->cost.get());
  if (analytical && !analytical->kernel_level()) analytical = nullptr;

  nlohmann::json j;
  j["config"] = o.config;
  j["cost_model"] = study->cost->describe();
  if (analytical) {
    const MicrobatchShape shape = OneMicrobatch(*study).shape(layer);
    j["layer"] = layer;
    j["tp"] = study->config.parallel.tp;
    if (study->config.parallel.cp > 1) j["cp"] = study->config.parallel.cp;
    j["kernels"] = nlohmann::json::array();
    for (const Kernel& k : analytical->kernels(layer, shape, study->config.parallel.tp)) {
      j["kernels"].push_back({{"name", k.name},
                              {"pass", to_string(k.pass)},
                              {"bound", to_string(k.bound)},
                              {"seconds", k.seconds},
                              {"flops", k.flops},
                              {"bytes", k.bytes}});
    }
  }
  j["iteration"] = iteration_json(*study, analytical);
  if (o.json)
    std::cout << j.dump(2) << "\n";
  else
    print_cost(j, study->cost->name());
  return 0;
}

}  // namespace

CommandRun attach_cost(CLI::App& sub) {
  auto o = std::make_shared<Options>();
  sub.add_option("config", o->config, "Config TOML")->required()->check(CLI::ExistingFile);
  sub.add_option("--set", o->overrides, "Override a config key: section.key=value");
  sub.add_option("--layer", o->layer,
                 "Global layer index whose kernels to list (default: the first layer of the "
                 "last module, usually the LLM)")
      ->check(CLI::NonNegativeNumber);
  sub.add_flag("--json", o->json, "Print the breakdown as JSON");
  return [o] { return run_cost(*o); };
}

}  // namespace loom
