#include "schedulers/lowering/partition.hpp"

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
  std::vector<double> prefix(static_cast<size_t>(n) + 1, 0.0);
  for (int i = 0; i < n; ++i)
    prefix[static_cast<size_t>(i) + 1] =
        prefix[static_cast<size_t>(i)] + costs[static_cast<size_t>(i)];
  const double inf = std::numeric_limits<double>::infinity();
  // best[s][i]: D(i, s); split[s][i]: the minimizing boundary j.
  std::vector<std::vector<double>> best(static_cast<size_t>(stages) + 1,
                                        std::vector<double>(static_cast<size_t>(n) + 1, inf));
  std::vector<std::vector<int>> split(static_cast<size_t>(stages) + 1,
                                      std::vector<int>(static_cast<size_t>(n) + 1, 0));
  for (int i = 1; i <= n; ++i) best[1][static_cast<size_t>(i)] = prefix[static_cast<size_t>(i)];
  for (int s = 2; s <= stages; ++s) {
    for (int i = s; i <= n; ++i) {
      for (int j = s - 1; j <= i - 1; ++j) {
        const double v = std::max(best[static_cast<size_t>(s) - 1][static_cast<size_t>(j)],
                                  prefix[static_cast<size_t>(i)] - prefix[static_cast<size_t>(j)]);
        // Ties (within rounding: two views of identical layers must cut alike) keep the
        // earliest boundary.
        const double cur = best[static_cast<size_t>(s)][static_cast<size_t>(i)];
        if (cur == inf || v < cur - 1e-9 * cur) {
          best[static_cast<size_t>(s)][static_cast<size_t>(i)] = v;
          split[static_cast<size_t>(s)][static_cast<size_t>(i)] = j;
        }
      }
    }
  }
  std::vector<StageRange> ranges(static_cast<size_t>(stages));
  int end = n;
  for (int s = stages; s >= 1; --s) {
    const int first = s == 1 ? 0 : split[static_cast<size_t>(s)][static_cast<size_t>(end)];
    ranges[static_cast<size_t>(s) - 1] = {first, end};
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
