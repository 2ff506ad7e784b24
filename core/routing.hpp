#pragma once
/// Router imbalance as variability (model.modules.<m>.routing, docs/moe.md): how a MoE
/// layer's routed tokens spread over its experts, drawn per layer, microbatch and
/// expert-parallel group from a seed, so the same seed gives the same loads.
///
///   balanced   every expert gets 1/experts of the token copies (Megatron-Bridge's published
///              MoE runs force it)
///   zipf:S     expert loads proportional to 1 / rank^S over a random ranking of the experts,
///              drawn anew for every (layer, microbatch, group)
///   trace:FILE measured loads: a CSV `layer,expert,load` (the module's layer, 0-based; loads
///              >= 0, normalised per layer), the same for every microbatch
///
/// A rank holds experts / ep consecutive experts: its share of the group's token copies is
/// the sum of theirs. Under a capacity factor c an expert computes at most c / experts of
/// them and drops the rest (Megatron's moe_expert_capacity_factor with token dropping).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace loom {

struct LayerSpec;

enum class RoutingKind : std::uint8_t { kBalanced, kZipf, kTrace };

struct Routing {
  RoutingKind kind = RoutingKind::kBalanced;
  double zipf_exponent = 0;
  std::string trace_path;
  /// trace: the module's layer -> load per expert, normalised to sum 1.
  std::map<int, std::vector<double>> trace_shares;
  std::uint64_t seed = 1;
  /// "balanced", "zipf:1.2", "trace:<path>" (what the config said).
  std::string text() const;
};

/// Parses a `routing` value; `experts` and `layers` check a trace (InputError naming the
/// file and line, or `key` for the value itself). `base_dir`: where a relative trace path is.
Routing parse_routing(const std::string& value, const std::string& key, int experts, int layers,
                      const std::string& base_dir);

/// What one MoE layer's routing gives one expert-parallel group for one microbatch.
struct ExpertLoad {
  std::vector<double> rank_share;  ///< per EP rank: its share of the group's token copies
  double dropped = 0;              ///< the share dropped by the capacity factor
  /// The busiest rank's share x ep: 1 when balanced, its all-to-all and GEMM factor.
  double busiest_factor() const;
  /// EP rank `member`'s share x ep: its experts' work against the balanced share.
  double member_factor(int member) const {
    return rank_share.at(static_cast<size_t>(member)) * static_cast<double>(rank_share.size());
  }
};

/// Loads of `layer` (the module's `local_layer`) for `microbatch` in EP group `group` of a
/// replica's `lane_group`: per-expert shares drawn by `routing`, summed per rank of `ep`.
ExpertLoad expert_load(const Routing& routing, const LayerSpec& layer, int local_layer,
                       int microbatch, int group, int ep);

/// Over every MoE layer of `model`, `microbatches` microbatches and `groups` expert-parallel
/// groups of `ep`: the busiest rank's factor (mean and max) and the dropped share (mean).
struct RoutingSummary {
  double mean_busiest_factor = 1;
  double max_busiest_factor = 1;
  double dropped = 0;
};
class Model;
RoutingSummary summarize_routing(const Model& model, int microbatches, int groups, int ep);

}  // namespace loom
