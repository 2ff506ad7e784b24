#include "schedulers/pipeline.hpp"

#include <algorithm>

#include "core/errors.hpp"

namespace loom {

std::vector<int> layer_producers(const Model& model, int layer) {
  const LayerRef& ref = model.layers()[static_cast<size_t>(layer)];
  if (ref.local_index > 0) return {layer - 1};
  std::vector<int> out;
  for (const std::string& input : model.module(ref.module).inputs) {
    const int m = model.module_index(input);
    int last = -1;
    for (int l = 0; l < model.num_layers(); ++l) {
      if (model.layers()[static_cast<size_t>(l)].module == m) last = l;
    }
    out.push_back(last);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<int> layer_consumers(const Model& model, int layer) {
  std::vector<int> out;
  for (int l = layer + 1; l < model.num_layers(); ++l) {
    const auto producers = layer_producers(model, l);
    if (std::find(producers.begin(), producers.end(), layer) != producers.end()) out.push_back(l);
  }
  return out;
}

namespace {

/// Everything the lowering needs about one (replica, microbatch).
struct MicrobatchCosts {
  std::vector<PassCost> layer;     ///< per layer, in the lowering's cost view
  std::vector<double> activation;  ///< bytes kept per layer
  std::vector<double> output;      ///< bytes of each layer's output
};

class Lowering {
 public:
  Lowering(const SchedulingProblem& problem, const char* name, const StageGraph& graph,
           const RankOrders& orders, LoweringCosts costs)
      : p_(problem),
        model_(*problem.model),
        graph_(graph),
        orders_(orders),
        naive_(costs == LoweringCosts::kNaive) {
    schedule_.scheduler = name;
    pp_ = static_cast<int>(graph.size());
    ranks_ = static_cast<int>(orders.size());
    dp_ = p_.parallel.dp;
    tp_ = p_.parallel.tp;
    m_ = p_.schedule.microbatches;
  }

  Schedule run() {
    if (ranks_ < 1 || pp_ % ranks_ != 0)
      throw std::logic_error("stage orders do not match the stage graph");
    place_ranks();
    assign_samples();
    map_layers_to_stages();
    for (int l = 0; l < model_.num_layers(); ++l) {
      producers_.push_back(layer_producers(model_, l));
      consumers_.push_back(layer_consumers(model_, l));
    }
    cost_microbatches();
    for (int d = 0; d < dp_; ++d) {
      for (int r = 0; r < ranks_; ++r) {
        for (const RankAction& a : orders_[static_cast<size_t>(r)]) {
          if (a.stage < 0 || a.stage >= pp_ || a.stage % ranks_ != r)
            throw std::logic_error("rank order names a virtual stage of another rank");
          emit(d, a.stage, {a.pass, a.microbatch});
        }
      }
    }
    add_gradient_allreduce();
    fill_static_memory();
    return std::move(schedule_);
  }

 private:
  /// Virtual stage s lives on rank s mod p of its replica (chunk s div p).
  int rank(int replica, int stage) const { return replica * ranks_ + stage % ranks_; }
  const StageSpec& stage(int s) const { return graph_[static_cast<size_t>(s)]; }
  /// p(L) of Eq 3.3; a frozen-unaware planner believes every layer needs a backward.
  bool upstream(int layer) const { return naive_ || model_.has_trainable_upstream(layer); }

  /// TP width of a stage (its explicit one, or parallel.tp) and of a layer's stage.
  int stage_tp(int s) const { return stage(s).tp > 0 ? stage(s).tp : tp_; }
  int layer_tp(int l) const { return stage_tp(stage_of_layer_[static_cast<size_t>(l)]); }

  void place_ranks() {
    for (const Module& mod : model_.modules()) schedule_.module_names.push_back(mod.name);
    schedule_.num_stages = ranks_;
    schedule_.microbatches = m_;
    schedule_.programs.resize(static_cast<size_t>(ranks_ * dp_));
    if (!graph_.empty() && !graph_.front().gpu.empty()) {
      // Explicit placement; check_placement() vets it against the cluster.
      for (int d = 0; d < dp_; ++d) {
        for (int s = 0; s < ranks_; ++s)
          schedule_.ranks.push_back({stage(s).gpu.at(static_cast<size_t>(d)), stage_tp(s), d});
      }
      return;
    }
    const Cluster& c = *p_.cluster;
    if (tp_ > c.gpus_per_node || c.gpus_per_node % tp_ != 0) {
      throw InputError("parallel.tp: " + std::to_string(tp_) +
                       " must divide cluster.gpus_per_node (" + std::to_string(c.gpus_per_node) +
                       "): a tensor-parallel group stays inside one node");
    }
    const int needed = ranks_ * dp_ * tp_;
    if (needed > c.num_gpus()) {
      throw InfeasibleError("parallel: " + std::to_string(ranks_) + " stages x dp " +
                            std::to_string(dp_) + " x tp " + std::to_string(tp_) + " = " +
                            std::to_string(needed) + " GPUs, but the cluster has " +
                            std::to_string(c.num_gpus()) + " (" + std::to_string(c.nodes) +
                            " nodes x " + std::to_string(c.gpus_per_node) + ")");
    }
    for (int d = 0; d < dp_; ++d) {
      for (int s = 0; s < ranks_; ++s) schedule_.ranks.push_back({rank(d, s) * tp_, tp_, d});
    }
  }

  void assign_samples() {
    if (!p_.assignment.empty()) {  // a scheduler's own batching (SchedulingProblem)
      if (p_.assignment.size() != static_cast<size_t>(dp_) ||
          p_.assignment.front().size() != static_cast<size_t>(m_))
        throw std::logic_error("sample assignment does not match dp x microbatches");
      schedule_.samples = p_.assignment;
      return;
    }
    const int mbs = p_.schedule.microbatch_size;
    const size_t needed = static_cast<size_t>(dp_) * m_ * mbs;
    if (p_.samples.size() < needed) {
      throw InputError("workload: the iteration needs dp x microbatches x microbatch_size = " +
                       std::to_string(needed) + " samples but the workload has " +
                       std::to_string(p_.samples.size()));
    }
    schedule_.samples.assign(static_cast<size_t>(dp_),
                             std::vector<std::vector<int>>(static_cast<size_t>(m_)));
    for (int d = 0; d < dp_; ++d) {
      for (int j = 0; j < m_; ++j) {
        for (int k = 0; k < mbs; ++k) {
          schedule_.samples[static_cast<size_t>(d)][static_cast<size_t>(j)].push_back(
              (d * m_ + j) * mbs + k);
        }
      }
    }
  }

  void map_layers_to_stages() {
    stage_of_layer_.assign(static_cast<size_t>(model_.num_layers()), -1);
    for (int s = 0; s < pp_; ++s) {
      for (const Segment& seg : stage(s).segments) {
        for (int l = seg.first; l < seg.end; ++l) {
          if (stage_of_layer_[static_cast<size_t>(l)] >= 0)
            throw std::logic_error("stage graph: layer " + std::to_string(l) + " on two stages");
          stage_of_layer_[static_cast<size_t>(l)] = s;
        }
      }
    }
    for (int l = 0; l < model_.num_layers(); ++l) {
      if (stage_of_layer_[static_cast<size_t>(l)] < 0)
        throw std::logic_error("stage graph: layer " + std::to_string(l) + " on no stage");
    }
  }

  void cost_microbatches() {
    costs_.resize(static_cast<size_t>(dp_ * m_));
    for (int d = 0; d < dp_; ++d) {
      for (int j = 0; j < m_; ++j) {
        std::vector<const Sample*> batch;
        for (int id : schedule_.samples[static_cast<size_t>(d)][static_cast<size_t>(j)]) {
          batch.push_back(&p_.samples[static_cast<size_t>(id)]);
        }
        MicrobatchCosts& mc = costs_[static_cast<size_t>(d * m_ + j)];
        for (int l = 0; l < model_.num_layers(); ++l) {
          const MicrobatchShape shape = layer_shape(model_, l, batch);
          const int tp = layer_tp(l);
          PassCost c = effective_cost(*p_.cost, model_, l, shape, tp);
          if (naive_) {  // §3.3.1: "backward passes take roughly twice as long as forward"
            c = p_.cost->layer_cost(l, shape, tp);
            c.input_grad_s = c.weight_grad_s = c.forward_s;
          }
          mc.layer.push_back(c);
          mc.activation.push_back(p_.cost->activation_bytes(l, shape, tp));
          mc.output.push_back(p_.cost->output_bytes(l, shape));
        }
      }
    }
  }

  bool needs_backward(const Segment& seg) const {
    for (int l = seg.first; l < seg.end; ++l) {
      if (upstream(l)) return true;
    }
    return false;
  }

  void emit_forward(std::vector<Op>& program, int d, int s, const MicrobatchCosts& mc, int mb) {
    for (const Segment& seg : stage(s).redundant) {
      Compute c{Pass::kF, s, mb, seg.module, seg.first, seg.end, 0, 0, false, 0, true};
      for (int l = seg.first; l < seg.end; ++l)
        c.seconds += mc.layer[static_cast<size_t>(l)].forward_s;
      program.push_back(c);
    }
    for (const Segment& seg : stage(s).segments) {
      for (int prod : producers_[static_cast<size_t>(seg.first)]) {
        const int from = stage_of_layer_[static_cast<size_t>(prod)];
        if (rank(d, from) != rank(d, s))
          program.push_back(Recv{rank(d, from),
                                 s,
                                 seg.module,
                                 {Pass::kF, mb, seg.first, prod},
                                 mc.output[static_cast<size_t>(prod)]});
      }
      Compute c{Pass::kF, s, mb, seg.module, seg.first, seg.end, 0, 0, false, 0};
      for (int l = seg.first; l < seg.end; ++l) {
        c.seconds += mc.layer[static_cast<size_t>(l)].forward_s;
        if (needs_backward(seg)) c.activation_bytes += mc.activation[static_cast<size_t>(l)];
      }
      program.push_back(c);
      const int last = seg.end - 1;
      for (int cons : consumers_[static_cast<size_t>(last)]) {
        const int to = stage_of_layer_[static_cast<size_t>(cons)];
        if (rank(d, to) != rank(d, s))
          program.push_back(Send{rank(d, to),
                                 s,
                                 seg.module,
                                 {Pass::kF, mb, cons, last},
                                 mc.output[static_cast<size_t>(last)]});
      }
    }
  }

  void emit_backward(std::vector<Op>& program, int d, int s, const MicrobatchCosts& mc,
                     const StageAction& a) {
    const int mb = a.microbatch;
    std::vector<Segment> segs = stage(s).segments;
    std::reverse(segs.begin(), segs.end());
    for (const Segment& seg : segs) {
      const int last = seg.end - 1;
      if (a.pass != Pass::kW && upstream(last)) {
        for (int cons : consumers_[static_cast<size_t>(last)]) {
          const int from = stage_of_layer_[static_cast<size_t>(cons)];
          if (rank(d, from) != rank(d, s))
            program.push_back(Recv{rank(d, from),
                                   s,
                                   seg.module,
                                   {Pass::kB, mb, cons, last},
                                   mc.output[static_cast<size_t>(last)]});
        }
      }
      Compute c{a.pass, s, mb, seg.module, seg.first, seg.end, 0, 0, false, 0};
      for (int l = seg.first; l < seg.end; ++l) {
        const PassCost& pc = mc.layer[static_cast<size_t>(l)];
        if (a.pass != Pass::kW) c.seconds += pc.input_grad_s;
        if (a.pass != Pass::kI) {
          c.seconds += pc.weight_grad_s;
          c.weight_grad_s += pc.weight_grad_s;
        }
      }
      c.releases_activation = a.pass != Pass::kI && needs_backward(seg);
      program.push_back(c);
      if (a.pass == Pass::kW) continue;
      for (int prod : producers_[static_cast<size_t>(seg.first)]) {
        const int to = stage_of_layer_[static_cast<size_t>(prod)];
        if (rank(d, to) != rank(d, s) && upstream(prod)) {
          program.push_back(Send{rank(d, to),
                                 s,
                                 seg.module,
                                 {Pass::kB, mb, seg.first, prod},
                                 mc.output[static_cast<size_t>(prod)]});
        }
      }
    }
  }

  void emit(int d, int s, const StageAction& a) {
    auto& program = schedule_.programs[static_cast<size_t>(rank(d, s))];
    const MicrobatchCosts& mc = costs_[static_cast<size_t>(d * m_ + a.microbatch)];
    if (a.pass == Pass::kF)
      emit_forward(program, d, s, mc, a.microbatch);
    else
      emit_backward(program, d, s, mc, a);
  }

  double trainable_parameters(int s, int* module) const {
    double params = 0;
    for (const Segment& seg : stage(s).segments) {
      for (int l = seg.first; l < seg.end; ++l) {
        if (!model_.layer(l).frozen) {
          params += p_.cost->parameters(l);
          *module = seg.module;
        }
      }
    }
    return params;
  }

  void add_gradient_allreduce() {
    if (dp_ <= 1) return;
    for (int s = 0; s < ranks_; ++s) {
      // One all-reduce per rank over the gradients of all its chunks (s, s + p, ...).
      int module = stage(s).segments.front().module;
      double bytes = 0;
      for (int v = s; v < pp_; v += ranks_)
        bytes +=
            trainable_parameters(v, &module) * p_.memory.gradient_bytes_per_param / stage_tp(v);
      if (bytes <= 0) continue;
      const int group = static_cast<int>(schedule_.groups.size());
      std::vector<int> members;
      for (int d = 0; d < dp_; ++d) members.push_back(rank(d, s));
      schedule_.groups.push_back(members);
      for (int r : members) {
        schedule_.programs[static_cast<size_t>(r)].push_back(
            Collective{CollectiveKind::kAllReduce, group, s, module, bytes});
      }
    }
  }

  void fill_static_memory() {
    std::vector<StaticMemory> per_stage(static_cast<size_t>(pp_));
    for (int s = 0; s < pp_; ++s) {
      StaticMemory& mem = per_stage[static_cast<size_t>(s)];
      auto add = [&](const Segment& seg, bool trained) {
        for (int l = seg.first; l < seg.end; ++l) {
          const double params = p_.cost->parameters(l) / stage_tp(s);
          mem.parameters += params * model_.layer(l).dtype_bytes;
          if (trained && !model_.layer(l).frozen) {
            mem.gradients += params * p_.memory.gradient_bytes_per_param;
            mem.optimizer += params * p_.memory.optimizer_bytes_per_param;
          }
        }
      };
      // A redundant copy holds the weights; only the real copy is trained.
      for (const Segment& seg : stage(s).redundant) add(seg, false);
      for (const Segment& seg : stage(s).segments) add(seg, true);
    }
    // A rank holds every chunk (virtual stage) placed on it.
    std::vector<StaticMemory> per_rank(static_cast<size_t>(ranks_));
    for (int s = 0; s < pp_; ++s) {
      StaticMemory& mem = per_rank[static_cast<size_t>(s % ranks_)];
      mem.parameters += per_stage[static_cast<size_t>(s)].parameters;
      mem.gradients += per_stage[static_cast<size_t>(s)].gradients;
      mem.optimizer += per_stage[static_cast<size_t>(s)].optimizer;
    }
    for (int d = 0; d < dp_; ++d) {
      for (int s = 0; s < ranks_; ++s)
        schedule_.static_memory.push_back(per_rank[static_cast<size_t>(s)]);
    }
  }

  const SchedulingProblem& p_;
  const Model& model_;
  const StageGraph& graph_;
  const RankOrders& orders_;
  bool naive_ = false;
  int pp_ = 1, dp_ = 1, tp_ = 1, m_ = 1;
  int ranks_ = 1;  ///< ranks per replica; pp_ / ranks_ chunks each
  Schedule schedule_;
  std::vector<int> stage_of_layer_;
  std::vector<std::vector<int>> producers_, consumers_;
  std::vector<MicrobatchCosts> costs_;
};

}  // namespace

std::vector<StageRange> plan_stages(const SchedulingProblem& problem) {
  return plan_stages(problem, problem.parallel.pp);
}

std::vector<StageRange> plan_stages(const SchedulingProblem& problem, int stages) {
  const Model& model = *problem.model;
  if (!problem.schedule.stage_layers.empty()) {
    return partition_explicit(problem.schedule.stage_layers, model.num_layers(), stages);
  }
  if (stages > model.num_layers()) {
    const bool virt = stages != problem.parallel.pp;
    throw InputError((virt ? "schedule.chunks: parallel.pp x chunks = " : "parallel.pp: ") +
                     std::to_string(stages) + " pipeline stages but the model has only " +
                     std::to_string(model.num_layers()) +
                     " layers (each stage needs at least one)");
  }
  // The representative microbatch: the first one of the iteration.
  std::vector<const Sample*> first;
  for (int k = 0;
       k < problem.schedule.microbatch_size && k < static_cast<int>(problem.samples.size()); ++k) {
    first.push_back(&problem.samples[static_cast<size_t>(k)]);
  }
  const auto costs = layer_costs(model, *problem.cost, problem.schedule.partition_view, first,
                                 problem.parallel.tp);
  return partition_min_bottleneck(costs, stages);
}

StageGraph chain_stages(const Model& model, const std::vector<StageRange>& ranges) {
  StageGraph graph;
  for (const StageRange& r : ranges) {
    StageSpec spec;
    for (int l = r.first; l < r.end; ++l) {
      const int module = model.layers()[static_cast<size_t>(l)].module;
      if (spec.segments.empty() || spec.segments.back().module != module)
        spec.segments.push_back({module, l, l + 1});
      else
        spec.segments.back().end = l + 1;
    }
    graph.push_back(spec);
  }
  return graph;
}

std::vector<int> stages_downstream(const Model& model, const StageGraph& graph) {
  const int stages = static_cast<int>(graph.size());
  std::vector<int> stage_of(static_cast<size_t>(model.num_layers()), 0);
  for (int s = 0; s < stages; ++s) {
    for (const Segment& seg : graph[static_cast<size_t>(s)].segments) {
      for (int l = seg.first; l < seg.end; ++l) stage_of[static_cast<size_t>(l)] = s;
    }
  }
  // Stage edges s -> t wherever a layer on s feeds a layer on t; longest path by
  // relaxation (the stage graph of a DAG model is a DAG).
  std::vector<std::vector<int>> next(static_cast<size_t>(stages));
  for (int l = 0; l < model.num_layers(); ++l) {
    for (int c : layer_consumers(model, l)) {
      const int a = stage_of[static_cast<size_t>(l)], b = stage_of[static_cast<size_t>(c)];
      if (a != b) next[static_cast<size_t>(a)].push_back(b);
    }
  }
  std::vector<int> depth(static_cast<size_t>(stages), 0);
  for (int round = 0; round < stages; ++round) {
    bool changed = false;
    for (int s = 0; s < stages; ++s) {
      for (int t : next[static_cast<size_t>(s)]) {
        if (depth[static_cast<size_t>(t)] + 1 > depth[static_cast<size_t>(s)]) {
          depth[static_cast<size_t>(s)] = depth[static_cast<size_t>(t)] + 1;
          changed = true;
        }
      }
    }
    if (!changed) break;
  }
  return depth;
}

StageOrders one_f_one_b_orders(const std::vector<int>& warmup, int microbatches) {
  const int m = microbatches;
  StageOrders orders(warmup.size());
  for (size_t s = 0; s < warmup.size(); ++s) {
    auto& order = orders[s];
    const int w = std::min(warmup[s], m);
    int next_f = 0;
    int next_b = 0;
    for (; next_f < w; ++next_f) order.push_back({Pass::kF, next_f});
    while (next_f < m) {
      order.push_back({Pass::kF, next_f++});
      order.push_back({Pass::kB, next_b++});
    }
    while (next_b < m) order.push_back({Pass::kB, next_b++});
  }
  return orders;
}

Schedule lower_stage_graph(const SchedulingProblem& problem, const char* scheduler_name,
                           const StageGraph& graph, const StageOrders& orders,
                           LoweringCosts costs) {
  // One rank per stage: v = 1 of the virtual-stage lowering.
  RankOrders per_rank(orders.size());
  for (size_t s = 0; s < orders.size(); ++s) {
    for (const StageAction& a : orders[s])
      per_rank[s].push_back({static_cast<int>(s), a.pass, a.microbatch});
  }
  return Lowering(problem, scheduler_name, graph, per_rank, costs).run();
}

Schedule lower_virtual_stages(const SchedulingProblem& problem, const char* scheduler_name,
                              const StageGraph& graph, const RankOrders& orders,
                              LoweringCosts costs) {
  return Lowering(problem, scheduler_name, graph, orders, costs).run();
}

void require_single_layout(const SchedulingProblem& problem, const char* scheduler_name) {
  if (!problem.parallel.module_layouts.empty()) {
    throw InputError("parallel.modules: scheduler '" + std::string(scheduler_name) +
                     "' runs the single layout parallel.pp/dp/tp; per-module layouts are "
                     "for the per-module schedulers (see loom schedulers)");
  }
}

Schedule lower_pipeline(const SchedulingProblem& problem, const char* scheduler_name,
                        const StageOrders& orders) {
  require_single_layout(problem, scheduler_name);
  if (problem.schedule.chunks != 1) {
    throw InputError("schedule.chunks: " + std::string(scheduler_name) +
                     " runs one chunk per rank (got " + std::to_string(problem.schedule.chunks) +
                     "); virtual stages are for interleaved-1f1b");
  }
  const StageGraph graph = chain_stages(*problem.model, plan_stages(problem));
  return lower_stage_graph(problem, scheduler_name, graph, orders);
}

Schedule lower_virtual_pipeline(const SchedulingProblem& problem, const char* scheduler_name,
                                const RankOrders& orders, int chunks) {
  require_single_layout(problem, scheduler_name);
  const int stages = problem.parallel.pp * chunks;
  const StageGraph graph = chain_stages(*problem.model, plan_stages(problem, stages));
  return lower_virtual_stages(problem, scheduler_name, graph, orders);
}

}  // namespace loom
