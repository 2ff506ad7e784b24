#pragma once
/// Layer profiling for the `calibrated` cost model (core/cost_calibrated.hpp): each
/// module's layer timed for forward (F), backward-input (I) and backward-weight (W) over a
/// sweep of token counts and tensor-parallel degrees, written as the CSV that model reads
/// (`layer,phase,tokens,tp,seconds`), so profile -> calibrated -> sim is one loop
/// (dissertation §4.4.1: a hardware-calibrated quadratic cost model from measurements).
///
/// A TP degree t is profiled as the shard one GPU of a t-way group computes (Megatron
/// column/row split: heads/t, kv_heads/t, ffn/t); degrees that do not divide the shapes
/// are skipped. The host backend runs whole layers on one rank, so host `exec` runs are
/// compared at tp 1.
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/model.hpp"
#include "core/workload.hpp"

namespace loom::exec {

struct ProfileRow {
  std::string layer;  ///< module name: the fit applies to all its layers
  char phase = 'F';   ///< F, I or W
  int tokens = 0;
  int tp = 1;
  double seconds = 0;  ///< median over the repeats
};

struct ProfileRequest {
  /// Token counts per module; empty: per module, its tokens per sample in the workload's
  /// first sample x {0.25, 0.5, 1, 1.5, 2} (the operating point and around it).
  std::vector<int> tokens;
  std::vector<int> tp = {1};
  int repeats = 5;  ///< timed runs per point (median); one untimed warm-up before them
  std::uint64_t seed = 0;
  std::function<void(const std::string& module, double done)> on_progress;
};

/// F, I and W seconds (medians over `repeats` after one warm-up) of one layer shard run
/// on one sequence of `tokens`, with inputs drawn from `seed`: what a backend measures.
using LayerTimer = std::function<std::array<double, 3>(
    const LayerSpec& shard, int head_dim, int tokens, int repeats, std::uint64_t seed)>;

/// The sweep every backend profiles: per module, its first layer at each of request.tp
/// (shards that divide) x the token counts, timed by `time`, reported as F, I, W rows.
std::vector<ProfileRow> profile_sweep(const Model& model, const Sample& first_sample,
                                      const ProfileRequest& request, const LayerTimer& time);

/// The median of `v` (the mean of the middle two when even); `v` must not be empty.
double median(std::vector<double> v);

/// Measures on the host (this thread, float math of executor/layer_math.hpp).
std::vector<ProfileRow> profile_host(const Model& model, const Sample& first_sample,
                                     const ProfileRequest& request);

/// The shard of `spec` one GPU of a `tp`-way group computes; false if tp does not divide.
bool tp_shard(const LayerSpec& spec, int tp, LayerSpec* shard);

void write_profile_csv(const std::string& path, const std::vector<ProfileRow>& rows);

}  // namespace loom::exec
