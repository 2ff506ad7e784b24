#pragma once
/// OmniBal (omnibal seed): balanced dynamic mini-batches by Iterative Sampling and
/// Filtering (§4.1, Alg 1-2), Balanced Model Partition searched around a greedy anchor
/// (§4.2, Eq 3-5), and adaptive per-stage recomputation from each stage's free memory
/// (§4.3; its appendix A.1.1 is missing from the text, so that part is reconstructed).
#include <cstdint>
#include <vector>

#include "schedulers/variability/disttrain.hpp"

namespace loom {

/// One sample's size as ISF sees it: images (here vision tokens) and text tokens.
struct SampleSize {
  double vision = 0;
  double text = 0;
};

/// ISF: `groups` mini-batches over all samples. Q_v, Q_t are the per-group means (every
/// sample of the iteration is used, so the budget is the batch's share; reconstructed),
/// Q'_v = Q_v and Q'_t = Q_t - 128 (§5.1). Up to `rounds` sampling (Alg 1, seeded
/// randperm) and filtering (Alg 2) rounds; accepted groups beyond `groups` are not taken,
/// and samples no round accepted go, largest first, to the group with the least
/// normalized load (reconstructed: a dataset-level ISF defers them to later batches).
/// Every group is non-empty when samples >= groups. Deterministic for a seed.
std::vector<std::vector<SampleId>> isf_groups(const PerSample<SampleSize>& sizes, int groups,
                                              int rounds, std::uint64_t seed);

/// BMP (§4.2): the anchor P+ balances forward time (greedy min-bottleneck), candidates
/// jitter each of its N-1 boundaries by up to `radius` layers, ranked by
/// VAR(fwd)/mean(fwd)^2 + SUM(comm)/SUM_anchor(comm) (Eq 4 + Eq 5; the paper sums them
/// without saying how they are normalized: reconstructed). Returns up to `top_k`
/// distinct candidates as stage ranges, best-ranked first.
std::vector<std::vector<StageRange>> bmp_candidates(const std::vector<double>& forward_s,
                                                    const std::vector<double>& boundary_bytes,
                                                    int stages, int radius, int top_k);

/// Adaptive recomputation (§4.3, reconstructed): for every stage whose rank would exceed
/// `memory_bytes` (static + peak live activations), recompute its layers one by one,
/// most activation bytes saved per second of recompute first, until it fits: a
/// recomputed layer keeps only its input and its backward re-runs its forward. Returns
/// the number of layers recomputed per stage; throws InfeasibleError when even full
/// recomputation does not fit.
std::vector<int> adaptive_recompute(Schedule& schedule, const SchedulingProblem& problem,
                                    double memory_bytes);

}  // namespace loom
