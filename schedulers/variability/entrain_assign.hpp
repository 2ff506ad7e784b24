#pragma once
/// Entrain's hierarchical microbatch assignment (dissertation §4.3, §4.5, Algorithm 4):
/// pure functions over per-sample workloads, no cost model, no I/O.
///
///   §4.3     DP-level: samples sorted by encoder workload, each to the replica with the
///            least LLM workload so far (B_global / DP samples each)
///   §4.5.1   K_eff = min(K, floor(sum w_enc / max w_enc)); S split into a coarse set S_c
///            (high LLM workload) and a fine set S_f; each sorted by w_enc descending and
///            assigned by the Min-Max (LPT) greedy on encoder workload
///   §4.5.2   pairwise deferral: microbatches sorted by LLM workload, top half S_ol, bottom
///            half S_ul; per pair the subset-sum DP picks the samples of i whose LLM work is
///            closest to delta = (w_i - w_j) / 2; V_ij of Eq 4.3; bottleneck matching by
///            binary search over V u L with DFS bipartite matching (Kuhn); execution
///            order (ol_0, ul_0, ol_1, ul_1, ...), pairs by heaviest encoder microbatch first
///
/// Sample "workload" is whatever the caller measures (seconds from the cost model in the
/// scheduler); samples are SampleIds, indices into the workload table.
#include <cstddef>
#include <optional>
#include <vector>

#include "core/index.hpp"

namespace loom {

/// Workload of one sample: the unified encoder (every encoder + projector, §4.5: "merging
/// the modality encoders into a single unified encoder module") and the LLM.
struct SampleWork {
  double encoder = 0;
  double llm = 0;
};

/// §4.3 (Algorithm 4 lines 1-2): `dp` minibatches of samples.size() / dp samples each (the
/// first size % dp replicas take one more). Each list is sorted by sample index.
PerReplica<std::vector<SampleId>> assign_replicas(const PerSample<SampleWork>& work, int dp);

/// Algorithm 4 line 3: min(K, floor(sum w_enc / max w_enc)), at least min(K, k_min) and at
/// most the number of samples. A batch without encoder work keeps K. k_min is Loom's guard
/// (the scheduler passes the pipeline depth): one outlier sample can hold most of a
/// replica's encoder work (an image of 37k patches in a SynthChartNet-like batch), and
/// line 3 alone would then run the whole minibatch as one microbatch.
int effective_microbatches(const PerSample<SampleWork>& work, const std::vector<SampleId>& samples,
                           int k, int k_min = 1);

/// Algorithm 4 lines 4-6: `k_eff` encoder microbatches. S_c = the ceil(n/2) samples of
/// highest LLM workload, S_f the rest (the split point is not given in §4.5.1;
/// reconstructed as the median); S_c then S_f, each by w_enc descending, go to the
/// microbatch with the least encoder workload (ties: fewer samples, then lower index).
std::vector<std::vector<SampleId>> stratified_assignment(const PerSample<SampleWork>& work,
                                                         const std::vector<SampleId>& samples,
                                                         int k_eff);

/// The subset-sum DP of §4.5.2 for one overloaded microbatch: LLM workloads rounded to
/// multiples of `unit`, a reachability table D over [0, w'] built once, then queried per
/// partner for the sum closest to delta (ties: the smaller sum). O(N_ol x w').
class SubsetSums {
 public:
  SubsetSums(const std::vector<double>& workloads, double unit);
  /// Positions (into the constructor's vector) of the subset whose rounded sum is closest
  /// to `target` (in the caller's units).
  std::vector<std::size_t> closest(double target) const;

 private:
  std::vector<std::size_t> units_;
  /// Per sum, the item that first reached it (none: unreachable, or the empty subset's 0).
  std::vector<std::optional<std::size_t>> from_;
  std::vector<std::size_t> sums_;  ///< the reachable sums, ascending (queries binary-search them)
  double unit_;
};

struct DeferralOptions {
  bool defer = true;  ///< false: the same pairs and order, nothing deferred (ablation)
  /// Discretization of the DP: units per heaviest microbatch LLM workload.
  int resolution = 1024;
  /// Lower bound on K_eff (see effective_microbatches()).
  int min_microbatches = 1;
};

/// One replica's plan, microbatches in execution order.
struct DeferralPlan {
  std::vector<std::vector<SampleId>> encoder;   ///< M^enc: samples whose encoder work runs in j
  std::vector<std::vector<SampleId>> llm;       ///< M^LLM: samples whose LLM work runs in j
  std::vector<std::vector<SampleId>> deferred;  ///< samples of M^enc_j whose LLM work runs in j+1
  double bottleneck_s = 0;                      ///< T*: the largest LLM workload after deferral
  double max_llm_before_s = 0;                  ///< the largest LLM workload of the M^enc
};

/// §4.5.2 (Algorithm 4 lines 7-15) on the stratified microbatches of one replica.
DeferralPlan pairwise_deferral(const PerSample<SampleWork>& work,
                               const std::vector<std::vector<SampleId>>& encoder_microbatches,
                               const DeferralOptions& options = {});

/// Algorithm 4 end to end for the global batch (samples 0..n-1): one plan per replica,
/// every replica with the same K_eff (the smallest over replicas, so that all pipelines
/// run the same number of microbatches).
struct EntrainAssignment {
  int k_eff = 0;
  PerReplica<DeferralPlan> replicas;
};
EntrainAssignment entrain_assign(const PerSample<SampleWork>& work, int dp, int k,
                                 const DeferralOptions& options = {});

/// Sum of a workload field over samples.
double encoder_work(const PerSample<SampleWork>& work, const std::vector<SampleId>& samples);
double llm_work(const PerSample<SampleWork>& work, const std::vector<SampleId>& samples);

}  // namespace loom
