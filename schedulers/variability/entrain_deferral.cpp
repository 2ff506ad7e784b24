// Entrain pairwise deferral (dissertation §4.5.2, Algorithm 4 lines 7-15, Eq 4.3, Fig 4.10).
//
//   M^enc sorted by w_LLM:  [ 9 8 7 | 3 3 2 ]      S_ol = top K/2, S_ul = bottom K/2
//   per pair (i, j):        S_deferred(i, j) = samples of i with LLM work closest to
//                           (w_i - w_j) / 2 (subset-sum DP)
//                           V_ij = max(w_i - w_def, w_j + w_def)              (Eq 4.3)
//   T* = min T in V u L such that every i with L_i > T matches a distinct j with V_ij <= T
//   execution order:        ol_0 ul_0 ol_1 ul_1 ...  (ul_k runs ol_k's deferred LLM work)
#include <algorithm>
#include <optional>
#include <stdexcept>

#include "core/index.hpp"
#include "schedulers/variability/entrain_assign.hpp"

namespace loom {
namespace {

/// Overloaded microbatches are rows i, underloaded ones columns j: positions in `ol`, `ul`.
struct PairTable {
  std::vector<MicrobatchId> ol, ul;
  std::vector<std::vector<double>> v;                        ///< V[i][j], Eq 4.3
  std::vector<std::vector<std::vector<SampleId>>> deferred;  ///< S_deferred(i, j)
  std::vector<double> l;                                     ///< L_i = w_LLM,i
};

PairTable build_pairs(const PerSample<SampleWork>& work,
                      const PerMicrobatch<std::vector<SampleId>>& mbs, const DeferralOptions& opt) {
  const int k = mbs.ssize();
  PerMicrobatch<double> w;
  for (const auto& mb : mbs) w.push_back(llm_work(work, mb));
  std::vector<MicrobatchId> order;
  for (const MicrobatchId j : mbs.ids()) order.push_back(j);
  std::stable_sort(order.begin(), order.end(),
                   [&](MicrobatchId a, MicrobatchId b) { return w[a] > w[b]; });
  PairTable t;
  t.ol.assign(order.begin(), order.begin() + k / 2);  // line 8: top K/2 ...
  t.ul.assign(order.begin() + k / 2, order.end());    // ... and the rest (K odd: one more)
  const double heaviest = k > 0 ? w[order.front()] : 0;
  const double unit = heaviest > 0 ? heaviest / std::max(1, opt.resolution) : 1;
  for (const MicrobatchId i : t.ol) {
    const auto& samples = mbs[i];
    std::vector<double> items;
    for (const SampleId s : samples) items.push_back(work[s].llm);
    const SubsetSums dp(items, unit);  // one table per overloaded microbatch (line 10)
    t.l.push_back(w[i]);
    t.v.emplace_back();
    t.deferred.emplace_back();
    for (const MicrobatchId j : t.ul) {
      const double wi = w[i], wj = w[j];
      std::vector<SampleId> chosen;
      for (const std::size_t pos : dp.closest((wi - wj) / 2)) chosen.push_back(samples[pos]);
      const double moved = llm_work(work, chosen);
      t.v.back().push_back(std::max(wi - moved, wj + moved));  // line 11, Eq 4.3
      t.deferred.back().push_back(chosen);
    }
  }
  return t;
}

/// Per overloaded position, the underloaded position it is paired with (none: unpaired);
/// per underloaded position, the overloaded one.
using Mates = std::vector<std::optional<size_t>>;

/// Kuhn's augmenting path from overloaded position i over edges V_ij <= T.
bool augment(const PairTable& t, size_t i, double threshold, Mates& mate_ul,
             std::vector<char>& seen) {
  for (size_t j = 0; j < t.ul.size(); ++j) {
    if (seen[j] || t.v[i][j] > threshold) continue;
    seen[j] = 1;
    const std::optional<size_t> other = mate_ul[j];
    if (!other || augment(t, *other, threshold, mate_ul, seen)) {
      mate_ul[j] = i;
      return true;
    }
  }
  return false;
}

/// BOTTLENECKMATCH's feasibility check at threshold T: every critical overloaded microbatch
/// (L_i > T) gets a distinct underloaded partner with V_ij <= T, by DFS-based bipartite
/// matching (§4.5.2). Returns mate[i] per overloaded position (none: not critical) or an
/// empty vector when infeasible (it stops at the first critical one left unmatched).
Mates match_at(const PairTable& t, double threshold) {
  Mates mate_ul(t.ul.size());
  std::vector<char> seen(t.ul.size());
  for (size_t i = 0; i < t.ol.size(); ++i) {
    if (t.l[i] <= threshold) continue;  // runs within T alone
    std::fill(seen.begin(), seen.end(), 0);
    if (!augment(t, i, threshold, mate_ul, seen)) return {};
  }
  Mates out(t.ol.size());
  for (size_t j = 0; j < mate_ul.size(); ++j)
    if (mate_ul[j]) out[*mate_ul[j]] = j;
  return out;
}

}  // namespace

DeferralPlan pairwise_deferral(const PerSample<SampleWork>& work,
                               const std::vector<std::vector<SampleId>>& encoder_microbatches,
                               const DeferralOptions& options) {
  const PerMicrobatch<std::vector<SampleId>> mbs(encoder_microbatches);
  const PairTable t = build_pairs(work, mbs, options);
  DeferralPlan plan;
  for (const auto& mb : mbs)
    plan.max_llm_before_s = std::max(plan.max_llm_before_s, llm_work(work, mb));
  // Units of execution: a pair (ol, ul) or a lone microbatch, each with its deferral set.
  struct Unit {
    std::vector<MicrobatchId> mbs;
    std::vector<SampleId> deferred;  ///< from mbs[0] to mbs[1]
    double encoder = 0;              ///< the unit's heaviest encoder microbatch
  };
  std::vector<Unit> units;
  auto push = [&](std::vector<MicrobatchId> unit_mbs, std::vector<SampleId> deferred) {
    double enc = 0;
    for (const MicrobatchId mb : unit_mbs) enc = std::max(enc, encoder_work(work, mbs[mb]));
    units.push_back({std::move(unit_mbs), std::move(deferred), enc});
  };
  if (t.ol.empty()) {
    for (const MicrobatchId j : t.ul) push({j}, {});
  } else {
    // Candidates: V u L, at least the heaviest underloaded microbatch (which can never
    // shed work) and at most max L (always feasible: nothing is critical).
    double floor_t = 0;
    for (const MicrobatchId j : t.ul) floor_t = std::max(floor_t, llm_work(work, mbs[j]));
    std::vector<double> cand(t.l.begin(), t.l.end());
    for (const auto& row : t.v) cand.insert(cand.end(), row.begin(), row.end());
    const double max_l = *std::max_element(t.l.begin(), t.l.end());
    std::erase_if(cand, [&](double c) { return c < floor_t || c > max_l; });
    cand.push_back(max_l);
    std::sort(cand.begin(), cand.end());
    cand.erase(std::unique(cand.begin(), cand.end()), cand.end());
    size_t lo = 0, hi = cand.size() - 1;  // feasibility is monotone in T: binary search
    while (lo < hi) {
      const size_t mid = (lo + hi) / 2;
      if (match_at(t, cand[mid]).empty())
        lo = mid + 1;
      else
        hi = mid;
    }
    const Mates mate = match_at(t, cand[lo]);
    // Non-critical overloaded microbatches take the remaining underloaded ones (heaviest
    // with lightest); Fig 4.8c balances them too, so their pair's deferral set is applied
    // as well (V_ij <= L_i <= T*, so T* is unchanged).
    std::vector<bool> used(t.ul.size(), false);
    for (const std::optional<size_t>& m : mate)
      if (m) used[*m] = true;
    Mates partner = mate;
    for (size_t i = 0; i < t.ol.size(); ++i) {
      if (partner[i]) continue;
      for (size_t j = t.ul.size(); j-- > 0;) {
        if (!used[j]) {
          used[j] = true;
          partner[i] = j;
          break;
        }
      }
    }
    for (size_t i = 0; i < t.ol.size(); ++i) {  // line 14: (ol_0, ul_0, ol_1, ul_1, ...)
      const size_t j = *partner[i];
      push({t.ol[i], t.ul[j]}, options.defer ? t.deferred[i][j] : std::vector<SampleId>{});
    }
    for (size_t j = 0; j < t.ul.size(); ++j)
      if (!used[j]) push({t.ul[j]}, {});
  }
  // The order of the pairs is not given (line 14 fixes only ol_k, ul_k adjacency): Loom
  // runs the pair with the heaviest encoder microbatch first, so that an outlier's long
  // encoder stages overlap the rest of the iteration instead of extending its cool-down.
  std::stable_sort(units.begin(), units.end(),
                   [](const Unit& a, const Unit& b) { return a.encoder > b.encoder; });
  for (Unit& u : units) {
    for (size_t k = 0; k < u.mbs.size(); ++k) {
      plan.encoder.push_back(mbs[u.mbs[k]]);
      plan.deferred.push_back(k == 0 ? std::move(u.deferred) : std::vector<SampleId>{});
    }
  }
  // Line 15: M^LLM_j = M^enc_j minus its deferred samples plus those deferred from j - 1.
  plan.llm.resize(plan.encoder.size());
  for (size_t j = 0; j < plan.encoder.size(); ++j) {
    for (const SampleId s : plan.encoder[j]) {
      const auto& d = plan.deferred[j];
      if (std::find(d.begin(), d.end(), s) == d.end()) plan.llm[j].push_back(s);
    }
    if (j > 0)
      plan.llm[j].insert(plan.llm[j].end(), plan.deferred[j - 1].begin(),
                         plan.deferred[j - 1].end());
    std::sort(plan.llm[j].begin(), plan.llm[j].end());
  }
  for (const auto& mb : plan.llm)
    plan.bottleneck_s = std::max(plan.bottleneck_s, llm_work(work, mb));
  return plan;
}

EntrainAssignment entrain_assign(const PerSample<SampleWork>& work, int dp, int k,
                                 const DeferralOptions& options) {
  EntrainAssignment out;
  const auto replicas = assign_replicas(work, dp);
  out.k_eff = k;
  for (const auto& r : replicas)
    out.k_eff = std::min(out.k_eff, effective_microbatches(work, r, k, options.min_microbatches));
  for (const auto& r : replicas)
    out.replicas.push_back(
        pairwise_deferral(work, stratified_assignment(work, r, out.k_eff), options));
  return out;
}

}  // namespace loom
