// Entrain: DP-level assignment (§4.3), stratified assignment (§4.5.1) and the subset-sum DP
// of pairwise deferral (§4.5.2). The matching itself is in entrain_deferral.cpp.
#include "schedulers/variability/entrain_assign.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <numeric>
#include <optional>
#include <stdexcept>

#include "core/index.hpp"

namespace loom {

double encoder_work(const PerSample<SampleWork>& work, const std::vector<SampleId>& samples) {
  double sum = 0;
  for (const SampleId s : samples) sum += work[s].encoder;
  return sum;
}

double llm_work(const PerSample<SampleWork>& work, const std::vector<SampleId>& samples) {
  double sum = 0;
  for (const SampleId s : samples) sum += work[s].llm;
  return sum;
}

namespace {

/// Indices of `samples` sorted by encoder workload descending (ties: lower index first, so
/// the assignment is deterministic).
std::vector<SampleId> by_encoder_descending(const PerSample<SampleWork>& work,
                                            std::vector<SampleId> samples) {
  std::stable_sort(samples.begin(), samples.end(),
                   [&](SampleId a, SampleId b) { return work[a].encoder > work[b].encoder; });
  return samples;
}

}  // namespace

PerReplica<std::vector<SampleId>> assign_replicas(const PerSample<SampleWork>& work, int dp) {
  if (dp < 1) throw std::invalid_argument("assign_replicas: dp < 1");
  std::vector<SampleId> all(work.size());
  std::iota(all.begin(), all.end(), SampleId{0});
  const int n = work.ssize();
  PerReplica<int> capacity(dp, n / dp);
  for (const ReplicaId d : IdRange<ReplicaId>(n % dp)) ++capacity[d];
  PerReplica<std::vector<SampleId>> replicas(dp);
  PerReplica<double> llm(dp, 0.0);
  // §4.3: heaviest encoder samples first, each to the replica with the least LLM work so
  // far among those with room (the minibatch size is B_global / DP).
  for (const SampleId s : by_encoder_descending(work, all)) {
    std::optional<ReplicaId> best;
    for (const ReplicaId d : replicas.ids()) {
      if (isize(replicas[d]) >= capacity[d]) continue;
      if (!best || llm[d] < llm[*best]) best = d;
    }
    replicas[*best].push_back(s);
    llm[*best] += work[s].llm;
  }
  for (auto& r : replicas) std::sort(r.begin(), r.end());
  return replicas;
}

int effective_microbatches(const PerSample<SampleWork>& work, const std::vector<SampleId>& samples,
                           int k, int k_min) {
  double max_enc = 0;
  for (const SampleId s : samples) max_enc = std::max(max_enc, work[s].encoder);
  int k_eff = k;
  if (max_enc > 0) {
    // Algorithm 4 line 3; the small tolerance keeps sum/max = 4 exactly at 4 after rounding.
    const double ratio = encoder_work(work, samples) / max_enc;
    k_eff = std::min(k, static_cast<int>(std::floor(ratio * (1 + 1e-12))));
    k_eff = std::max(k_eff, std::min(k, k_min));
  }
  return std::clamp(k_eff, 1, std::max(1, isize(samples)));
}

std::vector<std::vector<SampleId>> stratified_assignment(const PerSample<SampleWork>& work,
                                                         const std::vector<SampleId>& samples,
                                                         int k_eff) {
  if (k_eff < 1) throw std::invalid_argument("stratified_assignment: k_eff < 1");
  // Line 4: S_c = the half with the highest LLM workload, S_f the rest.
  std::vector<SampleId> by_llm = samples;
  std::stable_sort(by_llm.begin(), by_llm.end(),
                   [&](SampleId a, SampleId b) { return work[a].llm > work[b].llm; });
  const int coarse = (isize(by_llm) + 1) / 2;
  const std::vector<SampleId> s_c(by_llm.begin(), by_llm.begin() + coarse);
  const std::vector<SampleId> s_f(by_llm.begin() + coarse, by_llm.end());

  PerMicrobatch<std::vector<SampleId>> mbs(k_eff);
  PerMicrobatch<double> load(k_eff, 0.0);
  // Lines 5-6: S_c then S_f, each by w_enc descending, Min-Max greedy (an LPT list
  // schedule, within (2 - 1/K) of the optimal makespan by Graham's bound).
  for (const auto* set : {&s_c, &s_f}) {
    for (const SampleId s : by_encoder_descending(work, *set)) {
      MicrobatchId best{0};
      for (const MicrobatchId j : mbs.ids()) {
        if (load[j] < load[best] || (load[j] == load[best] && mbs[j].size() < mbs[best].size()))
          best = j;
      }
      mbs[best].push_back(s);
      load[best] += work[s].encoder;
    }
  }
  for (auto& mb : mbs) std::sort(mb.begin(), mb.end());
  return {std::make_move_iterator(mbs.begin()), std::make_move_iterator(mbs.end())};
}

SubsetSums::SubsetSums(const std::vector<double>& workloads, double unit) : unit_(unit) {
  if (!(unit > 0)) throw std::invalid_argument("SubsetSums: unit must be positive");
  std::size_t total = 0;
  for (double w : workloads) {
    units_.push_back(static_cast<std::size_t>(std::lround(std::max(0.0, w) / unit)));
    total += units_.back();
  }
  // D[x] reachable; from_[x] = the item that first reached x, so that walking back from x
  // visits items in decreasing index (classic 0/1 knapsack reconstruction).
  from_.assign(total + 1, std::nullopt);
  std::size_t reach = 0;
  for (std::size_t item = 0; item < units_.size(); ++item) {
    const std::size_t w = units_[item];
    if (w == 0) continue;  // contributes nothing to any sum: never worth deferring
    for (std::size_t x = reach + 1; x-- > 0;) {
      const bool reachable = x == 0 || from_[x];  // the empty subset reaches 0
      if (reachable && !from_[x + w]) from_[x + w] = item;
    }
    reach += w;
  }
  sums_.push_back(0);
  for (std::size_t x = 1; x < from_.size(); ++x)
    if (from_[x]) sums_.push_back(x);
}

std::vector<std::size_t> SubsetSums::closest(double target) const {
  const double t = target / unit_;
  // The reachable sums around t: the first at or above it and the one below (ties: smaller).
  auto it = std::lower_bound(sums_.begin(), sums_.end(), std::ceil(t));
  std::size_t best = it == sums_.end() ? sums_.back() : *it;
  if (it != sums_.begin() && std::abs(t - *std::prev(it)) <= std::abs(t - best))
    best = *std::prev(it);
  std::vector<std::size_t> items;
  for (std::size_t x = best; x > 0;) {
    const std::size_t i = *from_[x];
    items.push_back(i);
    x -= units_[i];
  }
  std::reverse(items.begin(), items.end());
  return items;
}

}  // namespace loom
