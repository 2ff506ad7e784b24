#include "schedulers/lowering/gradient_buckets.hpp"

#include <algorithm>
#include <optional>
#include <set>
#include <variant>

#include "core/index.hpp"

namespace loom::lowering {
namespace {

struct Bucket {
  int first_layer = 0;  ///< global layer range [first_layer, end_layer)
  int end_layer = 0;
  double bytes = 0;  ///< gradient bytes per GPU
};

bool reduces_gradients(const Op& op) {
  const auto* c = std::get_if<Compute>(&op);
  return c && (c->pass == Pass::kB || c->pass == Pass::kW) && !c->redundant;
}

/// Where each layer's weight gradients become final in a program: the index of the last
/// compute that produces them (none on this rank: nullopt).
class FinalBackward {
 public:
  FinalBackward(const std::vector<Op>& program, int layers) : at_(layers) {
    for (size_t i = 0; i < program.size(); ++i) {
      if (!reduces_gradients(program[i])) continue;
      const auto& c = std::get<Compute>(program[i]);
      for (std::optional<size_t>& at : layer_slice(at_, c.first_layer, c.end_layer)) at = i;
    }
  }
  std::optional<size_t> of(int layer) const { return at_[LayerId{layer}]; }

 private:
  PerLayer<std::optional<size_t>> at_;
};

/// The trainable layers rank r holds parameters for, ascending.
std::vector<int> trained_layers(const Context& ctx, PipelineRank r) {
  std::vector<int> out;
  for (const StageId s : ctx.stage_ids()) {
    if (!ctx.programs.holds(r, s)) continue;
    for (const Segment& seg : ctx.stage(s).segments) {
      for (int l = seg.first; l < seg.end; ++l) {
        if (!ctx.model.layer(l).frozen) out.push_back(l);
      }
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

/// Rank r's buckets, from one replica's program: its trained layers in the order their
/// gradients become final, cut wherever the next layer is not the trained layer just below
/// (so bucket ranges never interleave) or belongs to another stage, and within the rank's
/// first stage at `bucket_size` parameters per GPU. Megatron-Core wraps each model chunk
/// in its own DDP and buckets only the first (megatron/training/training.py, get_model:
/// disable_bucketing = model_chunk_idx > 0): a later chunk is one bucket.
std::vector<Bucket> form_buckets(const Context& ctx, PipelineRank r, const std::vector<int>& layers,
                                 const std::vector<Op>& program, double bucket_size) {
  std::optional<StageId> first_chunk;  // the rank's first model chunk
  for (const StageId s : ctx.stage_ids()) {
    if (!first_chunk && ctx.programs.holds(r, s)) first_chunk = s;
  }
  auto chunk = [&](int l) { return ctx.stage_of(l); };
  const FinalBackward last(program, ctx.model.num_layers());
  std::vector<int> order = layers;
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    const std::optional<size_t> fa = last.of(a), fb = last.of(b);
    return fa != fb ? fa < fb : a > b;
  });
  const double grad_bytes = ctx.problem.memory.gradient_bytes_per_param;
  std::vector<Bucket> buckets;
  double parameters = 0;
  for (size_t k = 0; k < order.size(); ++k) {
    const int l = order[k];
    const double p = data_parallel_parameters(ctx, l) / ctx.stage_tp(chunk(l));
    const bool extends = k > 0 && chunk(order[k - 1]) == chunk(l) &&
                         (chunk(l) != first_chunk || parameters < bucket_size) &&
                         std::lower_bound(layers.begin(), layers.end(), order[k - 1]) ==
                             std::lower_bound(layers.begin(), layers.end(), l) + 1;
    if (!extends) {
      buckets.push_back({l, l + 1, 0});
      parameters = 0;
    }
    buckets.back().first_layer = l;
    buckets.back().bytes += p * grad_bytes;
    parameters += p;
  }
  return buckets;
}

/// `c` cut at `cuts` (ascending, inside its range) into computes of its layer ranges, top
/// first (the order backward runs them), each timed by its layers' share of the costs.
std::vector<Compute> split_compute(const Compute& c, const std::vector<int>& cuts,
                                   const MicrobatchCosts& mc) {
  auto layer_time = [&](const PassCost& pc) {
    return (c.pass == Pass::kW ? 0 : pc.input_grad_s) + pc.weight_grad_s;
  };
  double total = 0, total_w = 0;
  for (const PassCost& pc : layer_slice(mc.layer, c.first_layer, c.end_layer)) {
    total += layer_time(pc);
    total_w += pc.weight_grad_s;
  }
  std::vector<int> bounds = {c.first_layer};
  bounds.insert(bounds.end(), cuts.begin(), cuts.end());
  bounds.push_back(c.end_layer);
  std::vector<Compute> pieces;
  for (size_t k = bounds.size() - 1; k > 0; --k) {
    Compute piece = c;
    piece.first_layer = bounds[k - 1];
    piece.end_layer = bounds[k];
    double t = 0, w = 0;
    for (const PassCost& pc : layer_slice(mc.layer, piece.first_layer, piece.end_layer)) {
      t += layer_time(pc);
      w += pc.weight_grad_s;
    }
    const double layers = c.end_layer - c.first_layer;
    piece.seconds = c.seconds * (total > 0 ? t / total : (bounds[k] - bounds[k - 1]) / layers);
    piece.weight_grad_s = total_w > 0 ? c.weight_grad_s * w / total_w : 0;
    piece.releases_activation = c.releases_activation && k == 1;  // the last piece to run
    pieces.push_back(piece);
  }
  return pieces;
}

/// Replica d's program with its final backward computes split at the bucket boundaries.
std::vector<Op> split_final_backward(const Context& ctx, int replica,
                                     const std::vector<Op>& program,
                                     const std::vector<Bucket>& buckets) {
  std::set<int> boundaries;
  for (const Bucket& b : buckets) {
    boundaries.insert(b.first_layer);
    boundaries.insert(b.end_layer);
  }
  const FinalBackward last(program, ctx.model.num_layers());
  std::vector<Op> out;
  out.reserve(program.size() + buckets.size());
  for (size_t i = 0; i < program.size(); ++i) {
    const auto* c = std::get_if<Compute>(&program[i]);
    std::vector<int> cuts;
    if (c && reduces_gradients(program[i]) && !c->overlapped) {
      for (auto it = boundaries.upper_bound(c->first_layer);
           it != boundaries.end() && *it < c->end_layer; ++it) {
        if (last.of(*it) == i) cuts.push_back(*it);
      }
    }
    if (cuts.empty()) {
      out.push_back(program[i]);
      continue;
    }
    for (Compute& piece : split_compute(*c, cuts, ctx.cost(replica, c->microbatch)))
      out.emplace_back(piece);
  }
  return out;
}

}  // namespace

bool overlaps_gradient_reduce(const Context& ctx) {
  return ctx.problem.parallel.overlap_grad_reduce && ctx.lanes() > 1 && !ctx.programs.up &&
         !ctx.programs.sharded();
}

void add_gradient_buckets(const Context& ctx, Schedule& schedule,
                          const std::function<double(PipelineRank)>& extra_bytes) {
  const SchedulingProblem& p = ctx.problem;
  const double bucket_size = p.parallel.grad_bucket_size > 0
                                 ? p.parallel.grad_bucket_size
                                 : std::max(40e6, 1e6 * p.data_parallel());
  const int ranks = ctx.programs.ranks;
  for (const PipelineRank r : IdRange<PipelineRank>(ranks)) {
    const std::vector<int> layers = trained_layers(ctx, r);
    std::vector<Bucket> buckets =
        form_buckets(ctx, r, layers, schedule.programs[ctx.global_rank(0, r)], bucket_size);
    if (buckets.empty()) continue;
    buckets.front().bytes += extra_bytes(r);
    std::vector<RankId> members;
    for (int d = 0; d < ctx.lanes(); ++d) members.push_back(ctx.global_rank(d, r));
    const GroupId group = schedule.add_group(std::move(members));
    for (int d = 0; d < ctx.lanes(); ++d) {
      auto& program = schedule.programs[ctx.global_rank(d, r)];
      std::vector<Op> split = split_final_backward(ctx, ctx.replica_of_lane(d), program, buckets);
      const FinalBackward last(split, ctx.model.num_layers());
      // Bucket k goes after the compute that finishes its last gradient and after bucket
      // k - 1: one order in every replica.
      std::vector<std::vector<const Bucket*>> after(split.size() + 1);
      std::optional<size_t> position;
      for (const Bucket& b : buckets) {
        for (int l = b.first_layer; l < b.end_layer; ++l) {
          if (std::binary_search(layers.begin(), layers.end(), l))
            position = std::max(position, last.of(l));
        }
        after[position ? *position + 1 : split.size()].push_back(&b);
      }
      program.clear();
      for (size_t i = 0; i <= split.size(); ++i) {
        for (const Bucket* b : after[i]) {
          const int top = b->end_layer - 1;
          program.emplace_back(Collective{.kind = CollectiveKind::kAllReduce,
                                          .group = group,
                                          .stage = ctx.stage_of(top),
                                          .module = ctx.model.module_of(top),
                                          .bytes = b->bytes,
                                          .async = true,
                                          .first_layer = b->first_layer,
                                          .end_layer = b->end_layer});
        }
        if (i < split.size()) program.push_back(std::move(split[i]));
      }
    }
  }
}

}  // namespace loom::lowering
