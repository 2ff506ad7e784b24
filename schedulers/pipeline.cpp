#include "schedulers/pipeline.hpp"

#include <algorithm>

#include "core/errors.hpp"

namespace loom {
namespace {

/// A stage's layers cut at module boundaries: one Compute per segment and pass, so the
/// timeline shows each module's share (e.g. a frozen encoder's empty backward).
struct Segment {
  int module = 0;
  int first = 0;
  int end = 0;
};

/// Producers/consumers of a layer along the model DAG (previous/next layer in the module,
/// or the modules joined by edges).
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

/// Everything the lowering needs about one (replica, microbatch).
struct MicrobatchCosts {
  std::vector<PassCost> layer;     ///< effective (frozen-aware) per layer
  std::vector<double> activation;  ///< bytes kept per layer
  std::vector<double> output;      ///< bytes of each layer's output
};

class Lowering {
 public:
  Lowering(const SchedulingProblem& problem, const char* name, const StageOrders& orders)
      : p_(problem), model_(*problem.model), orders_(orders) {
    schedule_.scheduler = name;
    pp_ = p_.parallel.pp;
    dp_ = p_.parallel.dp;
    tp_ = p_.parallel.tp;
    m_ = p_.schedule.microbatches;
  }

  Schedule run() {
    place_ranks();
    assign_samples();
    stages_ = plan_stages(p_);
    stage_of_layer_.assign(static_cast<size_t>(model_.num_layers()), 0);
    for (int s = 0; s < pp_; ++s) {
      for (int l = stages_[static_cast<size_t>(s)].first; l < stages_[static_cast<size_t>(s)].end;
           ++l) {
        stage_of_layer_[static_cast<size_t>(l)] = s;
      }
    }
    for (int l = 0; l < model_.num_layers(); ++l) {
      producers_.push_back(layer_producers(model_, l));
      consumers_.push_back(layer_consumers(model_, l));
    }
    cost_microbatches();
    if (static_cast<int>(orders_.size()) != pp_)
      throw std::logic_error("stage orders do not match pp");
    for (int d = 0; d < dp_; ++d) {
      for (int s = 0; s < pp_; ++s) {
        for (const StageAction& a : orders_[static_cast<size_t>(s)]) emit(d, s, a);
      }
    }
    add_gradient_allreduce();
    fill_static_memory();
    return std::move(schedule_);
  }

 private:
  int rank(int replica, int stage) const { return replica * pp_ + stage; }

  void place_ranks() {
    const Cluster& c = *p_.cluster;
    if (!p_.parallel.module_layouts.empty()) {
      throw InputError("parallel.modules: scheduler '" + schedule_.scheduler +
                       "' runs the single layout parallel.pp/dp/tp; per-module layouts are "
                       "for the per-module schedulers (see loom schedulers)");
    }
    if (tp_ > c.gpus_per_node || c.gpus_per_node % tp_ != 0) {
      throw InputError("parallel.tp: " + std::to_string(tp_) +
                       " must divide cluster.gpus_per_node (" + std::to_string(c.gpus_per_node) +
                       "): a tensor-parallel group stays inside one node");
    }
    const int needed = pp_ * dp_ * tp_;
    if (needed > c.num_gpus()) {
      throw InfeasibleError("parallel: pp x dp x tp = " + std::to_string(pp_) + " x " +
                            std::to_string(dp_) + " x " + std::to_string(tp_) + " = " +
                            std::to_string(needed) + " GPUs, but the cluster has " +
                            std::to_string(c.num_gpus()) + " (" + std::to_string(c.nodes) +
                            " nodes x " + std::to_string(c.gpus_per_node) + ")");
    }
    for (const Module& mod : model_.modules()) schedule_.module_names.push_back(mod.name);
    schedule_.num_stages = pp_;
    schedule_.microbatches = m_;
    for (int d = 0; d < dp_; ++d) {
      for (int s = 0; s < pp_; ++s) schedule_.ranks.push_back({rank(d, s) * tp_, tp_, d});
    }
    schedule_.programs.resize(static_cast<size_t>(pp_ * dp_));
  }

  void assign_samples() {
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
          mc.layer.push_back(effective_cost(*p_.cost, model_, l, shape, tp_));
          mc.activation.push_back(p_.cost->activation_bytes(l, shape, tp_));
          mc.output.push_back(p_.cost->output_bytes(l, shape));
        }
      }
    }
  }

  std::vector<Segment> segments(int stage) const {
    std::vector<Segment> out;
    const StageRange& r = stages_[static_cast<size_t>(stage)];
    for (int l = r.first; l < r.end; ++l) {
      const int module = model_.layers()[static_cast<size_t>(l)].module;
      if (out.empty() || out.back().module != module)
        out.push_back({module, l, l + 1});
      else
        out.back().end = l + 1;
    }
    return out;
  }

  bool needs_backward(const Segment& seg) const {
    for (int l = seg.first; l < seg.end; ++l) {
      if (model_.has_trainable_upstream(l)) return true;
    }
    return false;
  }

  void emit(int d, int s, const StageAction& a) {
    auto& program = schedule_.programs[static_cast<size_t>(rank(d, s))];
    const MicrobatchCosts& mc = costs_[static_cast<size_t>(d * m_ + a.microbatch)];
    const int mb = a.microbatch;
    std::vector<Segment> segs = segments(s);
    if (a.pass == Pass::kF) {
      for (const Segment& seg : segs) {
        for (int prod : producers_[static_cast<size_t>(seg.first)]) {
          const int from = stage_of_layer_[static_cast<size_t>(prod)];
          if (from != s)
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
          if (to != s)
            program.push_back(Send{rank(d, to),
                                   s,
                                   seg.module,
                                   {Pass::kF, mb, cons, last},
                                   mc.output[static_cast<size_t>(last)]});
        }
      }
      return;
    }
    std::reverse(segs.begin(), segs.end());
    for (const Segment& seg : segs) {
      const int last = seg.end - 1;
      if (a.pass != Pass::kW && model_.has_trainable_upstream(last)) {
        for (int cons : consumers_[static_cast<size_t>(last)]) {
          const int from = stage_of_layer_[static_cast<size_t>(cons)];
          if (from != s)
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
        if (to != s && model_.has_trainable_upstream(prod)) {
          program.push_back(Send{rank(d, to),
                                 s,
                                 seg.module,
                                 {Pass::kB, mb, seg.first, prod},
                                 mc.output[static_cast<size_t>(prod)]});
        }
      }
    }
  }

  double trainable_parameters(int stage, int* module) const {
    double params = 0;
    const StageRange& r = stages_[static_cast<size_t>(stage)];
    for (int l = r.first; l < r.end; ++l) {
      if (!model_.layer(l).frozen) {
        params += p_.cost->parameters(l);
        *module = model_.layers()[static_cast<size_t>(l)].module;
      }
    }
    return params;
  }

  void add_gradient_allreduce() {
    if (dp_ <= 1) return;
    for (int s = 0; s < pp_; ++s) {
      int module =
          model_.layers()[static_cast<size_t>(stages_[static_cast<size_t>(s)].first)].module;
      const double bytes =
          trainable_parameters(s, &module) * p_.memory.gradient_bytes_per_param / tp_;
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
      const StageRange& r = stages_[static_cast<size_t>(s)];
      for (int l = r.first; l < r.end; ++l) {
        const double params = p_.cost->parameters(l) / tp_;
        mem.parameters += params * model_.layer(l).dtype_bytes;
        if (!model_.layer(l).frozen) {
          mem.gradients += params * p_.memory.gradient_bytes_per_param;
          mem.optimizer += params * p_.memory.optimizer_bytes_per_param;
        }
      }
    }
    for (int d = 0; d < dp_; ++d) {
      for (int s = 0; s < pp_; ++s)
        schedule_.static_memory.push_back(per_stage[static_cast<size_t>(s)]);
    }
  }

  const SchedulingProblem& p_;
  const Model& model_;
  const StageOrders& orders_;
  int pp_ = 1, dp_ = 1, tp_ = 1, m_ = 1;
  Schedule schedule_;
  std::vector<StageRange> stages_;
  std::vector<int> stage_of_layer_;
  std::vector<std::vector<int>> producers_, consumers_;
  std::vector<MicrobatchCosts> costs_;
};

}  // namespace

std::vector<StageRange> plan_stages(const SchedulingProblem& problem) {
  const Model& model = *problem.model;
  if (!problem.schedule.stage_layers.empty()) {
    return partition_explicit(problem.schedule.stage_layers, model.num_layers(),
                              problem.parallel.pp);
  }
  if (problem.parallel.pp > model.num_layers()) {
    throw InputError("parallel.pp: " + std::to_string(problem.parallel.pp) +
                     " pipeline stages but the model has only " +
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
  return partition_min_bottleneck(costs, problem.parallel.pp);
}

Schedule lower_pipeline(const SchedulingProblem& problem, const char* scheduler_name,
                        const StageOrders& orders) {
  return Lowering(problem, scheduler_name, orders).run();
}

}  // namespace loom
