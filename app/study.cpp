#include "app/study.hpp"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <set>

#include "app/backends.hpp"
#include "core/errors.hpp"
#include "core/evaluator.hpp"
#include "core/index.hpp"
#include "core/kernel_jitter.hpp"
#include "core/packing.hpp"
#include "core/resources.hpp"
#include "core/validate.hpp"
#include "core/workload.hpp"
#include "core/workload_gen.hpp"

namespace loom {
namespace {

/// A token count for a modality no module reads would silently be ignored (a misspelt
/// column leaves the encoder with 0 tokens): reject it, naming where it came from.
void check_modalities(const Config& config, const Sample& sample) {
  std::set<std::string> read;
  for (const Module& m : config.model.modules()) {
    if (m.inputs.empty()) read.insert(m.modality);
    if (m.kind == ModuleKind::kLlm) read.insert("text");
  }
  for (const auto& [modality, tokens] : sample.tokens) {
    if (read.count(modality)) continue;
    std::string known;
    for (const std::string& k : read) known += (known.empty() ? "" : ", ") + k;
    throw InputError(config.workload.csv.empty()
                         ? config.path + ": key 'workload.tokens." + modality +
                               "': no module reads modality '" + modality +
                               "' (the model reads: " + known + ")"
                         : config.workload.csv + ":1: column '" + modality +
                               "_tokens': no module reads modality '" + modality +
                               "' (the model reads: " + known + ")");
  }
  // The other way round: a modality the model reads but the workload never gives would
  // leave its encoder with 0 tokens (0 ms forward) without a word.
  const bool synthetic = config.workload.csv.empty() && config.workload.dataset.empty();
  for (const std::string& modality : read) {
    const auto it = sample.tokens.find(modality);
    if (it == sample.tokens.end()) {
      throw InputError(config.workload.csv.empty()
                           ? config.path + ": key 'workload.tokens." + modality +
                                 "': missing, but the model reads modality '" + modality +
                                 "'; add workload.tokens." + modality + " = N (tokens per sample)"
                           : config.workload.csv + ":1: no column for modality '" + modality +
                                 "', which the model reads; add a '" + modality +
                                 "_tokens' column (0 for samples without it)");
    }
    if (synthetic && it->second == 0) {
      throw InputError(config.path + ": key 'workload.tokens." + modality +
                       "': 0 tokens, so every sample leaves the modules reading '" + modality +
                       "' without work; give at least 1");
    }
  }
}

/// Refuses (exit 3) a plan too big for this machine before building it: about 6 ops
/// (F, B or I + W, a send and a receive each way) per stage, microbatch and replica, a few
/// hundred bytes each through planning, the backend and the writers (~215 measured on
/// configs/bench/pp16-dp64.toml, doubled), plus per-layer costs of every microbatch and
/// the backend's per-GPU memory (SimGrid: the platform's hosts and links).
void check_plan_size(const Config& c) {
  const ParallelConfig& p = c.parallel;
  const int chunks = selected_integer_option(c.schedule, "chunks", 1);
  double rank_stages = static_cast<double>(p.pp) * p.dp * p.cp * chunks;
  for (const ModuleLayout& l : p.module_layouts)
    rank_stages = std::max(rank_stages, static_cast<double>(l.end_gpu()) * chunks);
  const double microbatches = c.schedule.microbatches;
  // Context parallelism splits each layer's pass into about 3 cp ops around its exchange,
  // forward and backward.
  const double ops =
      rank_stages * microbatches *
      (6 + (p.cp > 1 ? 6.0 * p.cp * c.model.num_layers() / std::max(1, p.pp * chunks) : 0));
  constexpr double kBytesPerOp = 450;
  constexpr double kBytesPerLayerCost = 64;  // per layer, microbatch and replica
  const double gpus = static_cast<double>(c.cluster.nodes) * c.cluster.gpus_per_node;
  const double bytes =
      ops * kBytesPerOp +
      static_cast<double>(c.model.num_layers()) * microbatches * p.dp * kBytesPerLayerCost +
      gpus * find_backend(c.sim.backend).bytes_per_gpu;
  char estimate[160];
  std::snprintf(estimate, sizeof estimate,
                "the schedule (about %.3g operations from %.0f rank-stages x %.0f microbatches; "
                "%.0f layers; %.0f GPUs)",
                ops, rank_stages, microbatches, static_cast<double>(c.model.num_layers()), gpus);
  check_memory_estimate(c.path + ": " + estimate, bytes,
                        "lower schedule.microbatches, parallel.dp/pp or the layer count");
}

/// The TP degrees a layer can run: dividing its attention heads, dividing or a multiple of
/// its key/value heads (Megatron replicates KV heads when tp exceeds them), and within one
/// node (a TP group's all-reduces stay on NVLink; check_placement).
std::string valid_tp_degrees(const LayerSpec& l, int gpus_per_node) {
  std::string out;
  for (int d = 1; d <= std::min(l.heads, gpus_per_node); ++d) {
    if (l.heads % d == 0 && (l.kv_heads % d == 0 || d % l.kv_heads == 0))
      out += (out.empty() ? "" : ", ") + std::to_string(d);
  }
  return out + " (dividing its " + std::to_string(l.heads) + " attention heads, dividing or a " +
         "multiple of its " + std::to_string(l.kv_heads) + " key/value heads, within a node of " +
         std::to_string(gpus_per_node) + " GPUs)";
}

/// Tensor parallelism splits a layer's attention heads over its TP GPUs: a degree that
/// does not divide them (tp = 3 with 16 heads) is no layout a framework can run.
void check_tp_divides_heads(const Config& c) {
  const Model& model = c.model;
  for (const ModuleId m : model.modules().ids()) {
    const Module& mod = model.module(m);
    const bool own = !c.parallel.module_layouts.empty();
    const int tp = own ? c.parallel.module_layouts[m].tp : c.parallel.tp;
    const std::string key = own ? "parallel.modules." + mod.name + ".tp" : "parallel.tp";
    for (const LayerSpec& l : mod.layers) {
      if (l.kind != LayerKind::kTransformer || tp == 1) continue;
      const std::string valid = valid_tp_degrees(l, c.cluster.gpus_per_node);
      if (l.heads % tp != 0)
        throw InputError(c.path + ": key '" + key + "': " + std::to_string(tp) +
                         " does not divide module '" + mod.name + "''s " + std::to_string(l.heads) +
                         " attention heads (tensor parallelism splits the heads over its "
                         "GPUs); use one of " +
                         valid);
      if (l.kv_heads % tp != 0 && tp % l.kv_heads != 0)
        throw InputError(c.path + ": key '" + key + "': " + std::to_string(tp) +
                         " neither divides nor is a multiple of module '" + mod.name + "''s " +
                         std::to_string(l.kv_heads) + " key/value heads; use one of " + valid);
      break;  // a module's layers share their shape
    }
  }
}

/// The iteration's batch of `needed` packs (core/packing.hpp) from the workload's stream
/// of samples, from workload.offset; pack ids 0.., each part keeping its sample's id.
std::vector<Sample> load_packed_workload(const Config& config, int needed) {
  const WorkloadConfig& w = config.workload;
  std::vector<Sample> rows;  // the CSV, whole
  if (!w.csv.empty()) rows = load_samples_csv(w.csv, w.image_tokens);
  const std::vector<Sample> same = synthetic_samples(1, w.tokens);
  const DatasetSpec spec =
      w.dataset.empty() ? DatasetSpec{} : find_dataset(w.dataset, w.images_per_sample);
  const SampleStream stream = [&](int i) -> std::optional<Sample> {
    const int id = w.offset + i;
    if (!w.dataset.empty())
      return generate_samples(spec, 1, static_cast<std::uint64_t>(w.seed), id, w.image_tokens)
          .front();
    if (w.csv.empty()) {
      Sample s = same.front();
      s.id = id;
      return s;
    }
    if (id >= isize(rows)) return std::nullopt;
    return rows[static_cast<size_t>(id)];
  };
  const std::optional<Sample> first = stream(0);
  if (first) check_modalities(config, *first);
  PackedBatch batch = pack_samples(config.model, needed, w.pack_tokens, stream);
  if (isize(batch.packs) < needed) {
    throw InputError(w.csv + ": has " + std::to_string(rows.size()) +
                     " samples; from workload.offset = " + std::to_string(w.offset) +
                     " they fill " + std::to_string(batch.packs.size()) +
                     " packs of workload.packing = \"" + format_packing(w.pack_tokens) +
                     "\", but one iteration needs dp x microbatches x microbatch_size = " +
                     std::to_string(needed));
  }
  return std::move(batch.packs);
}

std::vector<Sample> load_workload(const Config& config, int needed) {
  if (config.workload.pack_tokens > 0) return load_packed_workload(config, needed);
  if (!config.workload.dataset.empty()) {
    // Ids stay global (offset + i): the generator's draw for a sample depends on its id.
    std::vector<Sample> samples =
        generate_samples(find_dataset(config.workload.dataset, config.workload.images_per_sample),
                         needed, static_cast<std::uint64_t>(config.workload.seed),
                         config.workload.offset, config.workload.image_tokens);
    int id = 0;
    for (Sample& sample : samples) sample.id = id++;
    check_modalities(config, samples.front());
    return samples;
  }
  if (config.workload.csv.empty()) {
    std::vector<Sample> samples = synthetic_samples(needed, config.workload.tokens);
    if (!samples.empty()) check_modalities(config, samples.front());
    return samples;
  }
  std::vector<Sample> samples = load_samples_csv(config.workload.csv, config.workload.image_tokens);
  check_modalities(config, samples.front());
  const int offset = config.workload.offset;
  if (isize(samples) - needed < offset) {
    throw InputError(config.workload.csv + ": has " + std::to_string(samples.size()) +
                     " samples but one iteration needs dp x microbatches x microbatch_size = " +
                     std::to_string(needed) + " from workload.offset = " + std::to_string(offset));
  }
  samples.erase(samples.begin() + offset + needed, samples.end());
  samples.erase(samples.begin(), samples.begin() + offset);
  // Renumber in order: sample ids in the schedule index the iteration's batch.
  int id = 0;
  for (Sample& sample : samples) sample.id = id++;
  return samples;
}

}  // namespace

namespace {

/// Sets the problem's replicas to `replicas` and loads the samples they train on.
void plan_replicas(const Config& c, SchedulingProblem& p, int replicas) {
  p.parallel.dp = replicas;
  p.replica_fold = c.parallel.dp / replicas;
  Config sized = c;
  sized.parallel.dp = replicas;
  check_plan_size(sized);
  const size_t needed =
      static_cast<size_t>(replicas) * c.schedule.microbatches * c.schedule.microbatch_size;
  constexpr size_t kMaxSamples = 10'000'000;  // beyond this the plan alone would not fit in memory
  if (needed > kMaxSamples) {
    throw InputError(c.path +
                     ": parallel.dp x schedule.microbatches x schedule.microbatch_size = " +
                     std::to_string(needed) + " samples per iteration; Loom plans at most " +
                     std::to_string(kMaxSamples));
  }
  p.samples = load_workload(c, static_cast<int>(needed));  // at most kMaxSamples
}

Schedule generate_checked(const Study& study) {
  const Config& c = study.config;
  const SchedulingProblem& p = study.problem;
  // Planning errors name config keys ("parallel.tp: ..."); say which file they are in.
  try {
    const SchedulerInfo& scheduler = find_scheduler(c.schedule.name);
    Schedule schedule = scheduler.generate(p);
    check_placement(schedule, c.cluster);
    validate(schedule, c.model);
    check_fits_memory(schedule, c.cluster.gpu.memory_bytes, memory_levers(c));
    return schedule;
  } catch (const InputError& e) {
    throw InputError(c.path + ": " + e.what());
  } catch (const InfeasibleError& e) {
    throw InfeasibleError(c.path + ": " + e.what());
  }
}

/// Settings that are valid but do less than they seem to, said once at load.
std::vector<std::string> config_notes(const Config& c) {
  std::vector<std::string> notes;
  bool selective = c.cost.recompute == Recompute::kSelective;
  for (const Module& m : c.model.modules()) {
    for (const LayerSpec& l : m.layers)
      selective = selective || l.recompute == Recompute::kSelective;
  }
  if (!selective && c.cost.recompute_modules != RecomputeModules{})
    notes.push_back(c.path +
                    ": cost.recompute_modules applies to selective recompute only, "
                    "and cost.recompute is \"" +
                    to_string(c.cost.recompute) +
                    "\": the list is ignored (as Megatron ignores it)");
  if (selective && c.cost.flash_attention && c.cost.recompute_modules == RecomputeModules{})
    notes.push_back(c.path +
                    ": selective recompute under cost.attention = \"flash\" saves no memory "
                    "(FlashAttention keeps no attention scores to drop) and still re-runs the "
                    "attention core in the backward; use recompute = \"full\" to save memory, "
                    "or \"none\" (Korthikanti et al. 2022's selective recompute drops what flash "
                    "never stores)");
  return notes;
}

/// Why a plan of `fold.simulated` replicas cannot stand for the job's (empty: it can).
std::string fold_asymmetry(const Schedule& schedule, const Config& c, const ReplicaFold& fold) {
  std::string asymmetry = replica_asymmetry(schedule);
  const int replica_gpus = c.parallel.pp * c.parallel.cp * c.parallel.tp;
  const auto& ranks = schedule.ranks;
  if (asymmetry.empty() && ranks.back().gpu + ranks.back().tp != fold.simulated * replica_gpus)
    asymmetry = "replicas do not span parallel.pp x parallel.cp x parallel.tp GPUs each";
  return asymmetry;
}

}  // namespace

Config load_study_config(const ConfigSource& source, const std::vector<std::string>& overrides) {
  Config config = load_config(source, overrides);
  try {
    find_backend(config.sim.backend);
  } catch (const InputError& e) {
    throw InputError(source.path + ": key 'sim.backend': " + e.what());
  }
  static std::set<std::string> warned;  // a sweep or a comparison loads one config many times
  std::vector<std::string> warnings = check_scheduler_options(config.schedule);
  for (std::string& note : config_notes(config)) warnings.push_back(std::move(note));
  for (const std::string& w : warnings)
    if (warned.insert(w).second) std::cerr << "loom: warning: " << w << "\n";
  return config;
}

std::unique_ptr<Study> load_study(const ConfigSource& config,
                                  const std::vector<std::string>& overrides, Folding folding) {
  auto study = std::make_unique<Study>();
  study->config = load_study_config(config, overrides);
  // A rank's flow stands for its TP group's tp GPU flows on the links they share.
  if (study->config.parallel.module_layouts.empty())
    study->config.cluster.flow_copies = study->config.parallel.tp;
  const Config& c = study->config;
  study->cost = make_cost_model(c);
  SchedulingProblem& p = study->problem;
  p.model = &c.model;
  p.cluster = &c.cluster;
  p.cost = study->cost.get();
  p.parallel = c.parallel;
  p.schedule = c.schedule;
  p.memory = c.cost.memory;
  check_tp_divides_heads(c);
  study->fold.total = study->fold.simulated = c.parallel.dp;
  if (folding == Folding::kAllowed) study->fold = plan_replica_fold(c);
  plan_replicas(study->config, study->problem, study->fold.simulated);
  return study;
}

std::unique_ptr<Study> prepare_study(const ConfigSource& config,
                                     const std::vector<std::string>& overrides, Folding folding) {
  auto study = load_study(config, overrides, folding);
  plan_study(*study);
  return study;
}

void plan_study(Study& study) {
  study.schedule = generate_checked(study);
  ReplicaFold& fold = study.fold;
  if (fold.folded()) {
    const std::string asymmetry = fold_asymmetry(study.schedule, study.config, fold);
    if (asymmetry.empty()) {
      study.schedule.replica_fold = fold.factor();
    } else {
      // The plan says what the config could not: plan every replica.
      fold.simulated = fold.total;
      fold.reason = "the plan's replicas differ (" + asymmetry + ")";
      plan_replicas(study.config, study.problem, fold.total);
      study.schedule = generate_checked(study);
    }
  }
  const Config& c = study.config;
  apply_kernel_jitter(study.schedule, {.sigma = c.cost.jitter,
                                       .seed = static_cast<std::uint64_t>(c.cost.jitter_seed),
                                       .offset = static_cast<std::uint64_t>(c.workload.offset)});
}

bool view_needs_replanning(const Config& c, PartitionView view) {
  // Under the study's own view, with no layout or kernel noise to leave out, the question
  // is what the study's own plan is worth: evaluate it rather than plan again (8 s at 16,384
  // GPUs unfolded). A planner bounded by wall time (the cp ILP's time_limit_s, dip_search's
  // budget) could plan otherwise a second time; the study's plan is the one it ran.
  return !(view == c.schedule.partition_view && c.schedule.layout.empty() &&
           c.schedule.stage_layers.empty() && c.cost.jitter == 0);
}

double evaluate_replanned(const Config& config, SchedulingProblem p, PartitionView view,
                          int replica_fold) {
  p.schedule.partition_view = view;
  p.schedule.stage_layers.clear();
  p.schedule.layout.clear();
  const SchedulerInfo& scheduler = find_scheduler(p.schedule.name);
  // Folded wherever the job allows, whatever sim.fold says: a folded plan's evaluator time is
  // the whole job's to the last digit (tests/sim/replica_fold_test.cpp), and a --no-fold run
  // of 16,384 GPUs need not plan the whole job a second time for this one figure.
  Config foldable = config;
  foldable.sim.fold = true;
  if (const ReplicaFold fold = plan_replica_fold(foldable);
      fold.folded() && fold.simulated < p.parallel.dp) {
    SchedulingProblem folded = p;
    plan_replicas(config, folded, fold.simulated);
    Schedule schedule = scheduler.generate(folded);
    if (fold_asymmetry(schedule, config, fold).empty()) {
      schedule.replica_fold = fold.factor();
      return evaluate(schedule, *p.cluster).iteration_time_s();
    }
  }
  Schedule schedule = scheduler.generate(p);
  schedule.replica_fold = replica_fold;
  return evaluate(schedule, *p.cluster).iteration_time_s();
}

double evaluate_with_view(const Study& study, PartitionView view, const Matching* matching) {
  if (!view_needs_replanning(study.config, view))
    return evaluate(study.schedule, *study.problem.cluster, matching).iteration_time_s();
  return evaluate_replanned(study.config, study.problem, view, study.schedule.replica_fold);
}

std::string unapplied_options(const Study& study) {
  const Config& c = study.config;
  if (!c.parallel.overlap_grad_reduce) return "";
  // The option applies where the schedule still reduces gradients in one blocking
  // all-reduce after the flush (a schedule with nothing to reduce has nothing to warn of).
  bool blocking_reduction = false;
  for (const auto& program : study.schedule.programs) {
    for (const Op& op : program) {
      const auto* coll = std::get_if<Collective>(&op);
      blocking_reduction =
          blocking_reduction || (coll && coll->kind == CollectiveKind::kAllReduce && !coll->async &&
                                 !coll->tied_embedding);
    }
  }
  if (!blocking_reduction) return "";
  const std::string& name = c.schedule.name;
  const std::string why =
      name.rfind("hetero-", 0) == 0
          ? name + " reduces each stage over its own copies (per-module layouts)"
          : name + " runs two copies of each stage";
  return "parallel.overlap_grad_reduce has no effect here: " + why +
         ", so the gradients are reduced after the pipeline flush (docs/cost-model.md)";
}

MemoryLevers memory_levers(const Config& c) {
  return {.tp = max_tensor_parallel(c.parallel),
          .dp = c.parallel.dp,
          .sequence_parallel = c.parallel.sequence_parallel,
          .distributed_optimizer = c.cost.memory.distributed_optimizer,
          .fsdp = c.parallel.fsdp,
          .recompute = c.cost.recompute,
          .recompute_modules = c.cost.recompute_modules,
          .kernel_level = c.cost.model == "analytical" && c.cost.efficiency <= 0,
          .flash_attention = c.cost.flash_attention,
          .moe = std::ranges::any_of(c.model.modules(),
                                     [](const Module& m) {
                                       return std::ranges::any_of(
                                           m.layers, [](const LayerSpec& l) { return l.moe(); });
                                     }),
          .fp8 = c.cost.fp8 != Fp8Recipe::kOff};
}

Metrics study_metrics(const Study& study, const Timeline& timeline) {
  Metrics m = compute_metrics(study.schedule, timeline);
  const std::vector<Sample>& samples = study.problem.samples;
  if (!samples.empty())
    m.throughput_samples_per_s *= static_cast<double>(sample_count(samples)) / isize(samples);
  return m;
}

TrainingRates study_rates(const Study& study, double iteration_time_s) {
  const IterationWork work =
      iteration_work(study.schedule, *study.problem.model, study.problem.samples);
  return training_rates(study.schedule, work, iteration_time_s,
                        study.config.cluster.gpu.peak_flops);
}

}  // namespace loom
