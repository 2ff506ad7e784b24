#pragma once
/// Contiguous stage partitioning by the min-bottleneck dynamic program of dissertation
/// Eq 3.5, fed with per-layer costs T_l from a selectable cost view (§3.3.1):
///   true   T_l = F + Bd + Bw with frozen status applied (Eq 3.2-3.3)
///   naive  T_l = F + 2F, every layer assumed trainable (the "backward = 2 x forward" rule)
#include <vector>

#include "core/config.hpp"
#include "core/cost_model.hpp"
#include "core/model.hpp"
#include "core/workload.hpp"

namespace loom {

/// A stage covers global layers [first, end).
struct StageRange {
  int first = 0;
  int end = 0;
};

/// Per-layer costs T_l of one representative microbatch under `view`.
std::vector<double> layer_costs(const Model& model, const CostModel& cost, PartitionView view,
                                const std::vector<const Sample*>& microbatch, int tp);

/// Eq 3.5: D(i, s) = min over s-1 <= j <= i-1 of max(D(j, s-1), P_i - P_j), every stage
/// non-empty (the reading notes' [AMBIG]: j = i would allow an empty stage). Ties break
/// towards the earliest boundary, so results are deterministic.
/// Throws InputError when there are more stages than layers.
std::vector<StageRange> partition_min_bottleneck(const std::vector<double>& costs, int stages);

/// Explicit `schedule.stage_layers` (layers per stage), checked against the model.
std::vector<StageRange> partition_explicit(const std::vector<int>& stage_layers, int num_layers,
                                           int stages);

}  // namespace loom
