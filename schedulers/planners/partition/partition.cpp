#include "schedulers/planners/partition/partition.hpp"

#include <limits>

#include "core/errors.hpp"
#include "core/index.hpp"

namespace loom {

std::vector<double> layer_costs(const Model& model, const CostModel& cost, PartitionView view,
                                const std::vector<const Sample*>& microbatch, int tp) {
  std::vector<double> costs;
  for (int l = 0; l < model.num_layers(); ++l) {
    const MicrobatchShape shape = layer_shape(model, l, microbatch);
    if (view == PartitionView::kTrue) {
      const PassCost c = effective_cost(cost, model, l, shape, tp);
      costs.push_back(c.forward_s + c.backward_s());
    } else {
      costs.push_back(3.0 * cost.layer_cost(l, shape, tp).forward_s);
    }
  }
  return costs;
}

std::vector<StageRange> partition_min_bottleneck(const std::vector<double>& costs, int stages) {
  const int n = isize(costs);
  if (stages > n) {
    throw InputError("parallel.pp: " + std::to_string(stages) +
                     " pipeline stages but the model has only " + std::to_string(n) +
                     " layers (each stage needs at least one)");
  }
  const size_t layers = costs.size();
  const size_t parts = static_cast<size_t>(stages);
  std::vector<double> prefix(layers + 1, 0.0);
  for (size_t i = 0; i < layers; ++i) prefix[i + 1] = prefix[i] + costs[i];
  const double inf = std::numeric_limits<double>::infinity();
  // best[s][i]: D(i, s); split[s][i]: the minimizing boundary j.
  std::vector<std::vector<double>> best(parts + 1, std::vector<double>(layers + 1, inf));
  std::vector<std::vector<size_t>> split(parts + 1, std::vector<size_t>(layers + 1, 0));
  for (size_t i = 1; i <= layers; ++i) best[1][i] = prefix[i];
  for (size_t s = 2; s <= parts; ++s) {
    for (size_t i = s; i <= layers; ++i) {
      for (size_t j = s - 1; j < i; ++j) {
        const double v = std::max(best[s - 1][j], prefix[i] - prefix[j]);
        // Ties (within rounding: two views of identical layers must cut alike) keep the
        // earliest boundary.
        const double cur = best[s][i];
        if (cur == inf || v < cur - 1e-9 * cur) {
          best[s][i] = v;
          split[s][i] = j;
        }
      }
    }
  }
  std::vector<StageRange> ranges(parts);
  size_t end = layers;
  for (size_t s = parts; s > 0; --s) {
    const size_t first = s == 1 ? 0 : split[s][end];
    ranges[s - 1] = {static_cast<int>(first), static_cast<int>(end)};
    end = first;
  }
  return ranges;
}

std::vector<StageRange> partition_explicit(const std::vector<int>& stage_layers, int num_layers,
                                           int stages) {
  if (isize(stage_layers) != stages) {
    throw InputError("schedule.stage_layers: " + std::to_string(stage_layers.size()) +
                     " entries but parallel.pp is " + std::to_string(stages));
  }
  std::vector<StageRange> ranges;
  int first = 0;
  for (int count : stage_layers) {
    if (count < 1) throw InputError("schedule.stage_layers: every stage needs at least one layer");
    ranges.push_back({first, first + count});
    first += count;
  }
  if (first != num_layers) {
    throw InputError("schedule.stage_layers: sums to " + std::to_string(first) +
                     " layers but the model has " + std::to_string(num_layers));
  }
  return ranges;
}

}  // namespace loom
