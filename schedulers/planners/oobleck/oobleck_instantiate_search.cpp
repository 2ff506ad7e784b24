// Exact branch and bound over Eq 2.5's X (dissertation §2.4.2): the X of highest throughput
// after Eq 2.6's batch distribution, without storing every X or distributing the batch for
// each. A cheap lower bound on every X's iteration time prunes almost all of them:
//
//   slowest pipeline >= (NB + sum_i a_i / t_i) / sum_i 1 / t_i      (continuous relaxation)
//
// with T_i(N) = a_i + t_i N the unclamped Eq 2.2 (a = T1 + T3 - (S - k* + 1) t_k*) and NB =
// B / b: any split of NB microbatches has one pipeline at or above the time where all are
// equal, and Eq 2.2's floor at T1 only raises times. The gradient sync is exact and
// separable: the busiest node's per-layer rings of the worst template in X, times
// 2(r-1)/r. Candidates are evaluated exactly in bound order until the bound passes the
// best time, so the result is the exhaustive search's, ties included (first X in
// feasible_counts' order).
#include <algorithm>
#include <limits>

#include "core/errors.hpp"
#include "schedulers/planners/oobleck/oobleck_planner.hpp"

namespace loom::oobleck {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
/// The bound and the exact time round differently; never prune on a last-bit difference.
constexpr double kSlack = 1 + 1e-9;

/// Per-template constants of the bound.
struct TemplateTerms {
  double inv_t = 0;  ///< 1 / t_k*
  double a_over_t = 0;
  double sync_w = 0;  ///< busiest node's sum of two-member across-node all-reduces
  bool zero_t = false;
};

std::vector<TemplateTerms> template_terms(const PlanningProblem& problem,
                                          const std::vector<PipelineTemplate>& templates) {
  std::vector<TemplateTerms> out;
  for (const PipelineTemplate& t : templates) {
    TemplateTerms x;
    const double a = t.t1_s + t.t3_s - (t.num_stages() - t.slowest_stage + 1) * t.slowest_s;
    x.zero_t = !(t.slowest_s > 0);
    if (!x.zero_t) {
      x.inv_t = 1 / t.slowest_s;
      x.a_over_t = a / t.slowest_s;
    }
    std::vector<double> per_node(static_cast<size_t>(t.nodes), 0);
    for (const TemplateStage& s : t.stages) {
      for (int l = s.layer_begin; l < s.layer_end; ++l)
        per_node[static_cast<size_t>(s.node)] +=
            problem.layers[static_cast<size_t>(l)].allreduce_across_nodes_s;
    }
    for (double v : per_node) x.sync_w = std::max(x.sync_w, v);
    out.push_back(x);
  }
  return out;
}

struct Candidate {
  double bound = 0;
  long order = 0;  ///< position in feasible_counts' order (the exhaustive tie-break)
  std::vector<int> counts;
};

/// Depth-first enumeration of X in feasible_counts' order: multisets of template indices
/// as non-increasing sequences, lexicographically ascending (the coin-change DP of Eq 2.5
/// appends an X when its largest template is processed, after the X it extends).
class Enumerator {
 public:
  Enumerator(const PlanningProblem& problem, const std::vector<PipelineTemplate>& templates,
             int nodes)
      : p_(problem), ts_(templates), terms_(template_terms(problem, templates)), nodes_(nodes) {
    // descend() recurses once per pipeline: N / n_0 deep. Past a few thousand that is a
    // stack overflow (a segfault at --nodes 100000), and the number of X to enumerate
    // grows exponentially long before.
    constexpr int kMaxPipelines = 4096;
    if (!ts_.empty() && nodes / ts_.front().nodes > kMaxPipelines) {
      throw InfeasibleError("oobleck: " + std::to_string(nodes) + " nodes make up to " +
                            std::to_string(nodes / ts_.front().nodes) +
                            " pipelines of the smallest template (" +
                            std::to_string(ts_.front().nodes) +
                            " nodes); the instantiation search (Eq 2.5) enumerates at most " +
                            std::to_string(kMaxPipelines) + " pipelines: use at most " +
                            std::to_string(kMaxPipelines * ts_.front().nodes) + " nodes");
    }
    total_mb_ = problem.microbatch_size > 0 ? problem.global_batch / problem.microbatch_size : 0;
    // reach_[j][n]: n nodes are a sum of sizes of templates 0..j (or n = 0).
    reach_.assign(ts_.size(), std::vector<char>(static_cast<size_t>(nodes) + 1, 0));
    for (size_t j = 0; j < ts_.size(); ++j) {
      reach_[j][0] = 1;
      for (int n = 1; n <= nodes; ++n) {
        const int nj = ts_[j].nodes;
        reach_[j][static_cast<size_t>(n)] = (j > 0 && reach_[j - 1][static_cast<size_t>(n)]) ||
                                            (n >= nj && reach_[j][static_cast<size_t>(n - nj)]);
      }
    }
    counts_.assign(ts_.size(), 0);
  }

  /// Calls visit(bound, order, counts) for every feasible X (Eq 2.5, >= f+1 pipelines).
  template <class Visit>
  void run(Visit&& visit) {
    order_ = 0;
    if (!ts_.empty()) descend(ts_.size() - 1, nodes_, 0, 0, 0, 0, false, visit);
  }

  long feasible() const { return order_; }
  bool distributable(int pipelines) const {
    return p_.microbatch_size > 0 && p_.global_batch % p_.microbatch_size == 0 &&
           pipelines <= total_mb_;
  }

 private:
  template <class Visit>
  void descend(size_t max_j, int left, int r, double inv_t, double a_over_t, double w, bool zero_t,
               Visit& visit) {
    if (left == 0) {
      if (r < p_.fault_tolerance + 1) return;  // Requirement 2 of Eq 2.5
      const double relax = zero_t || inv_t <= 0 ? 0 : (total_mb_ + a_over_t) / inv_t;
      const double sync = r > 1 ? w * 2.0 * (r - 1) / r : 0;
      visit(std::max(0.0, relax) + sync, order_++, counts_, r);
      return;
    }
    const int n0 = ts_.front().nodes;
    if (r + left / n0 < p_.fault_tolerance + 1) return;  // cannot reach f+1 pipelines
    for (size_t j = 0; j <= max_j; ++j) {
      const int nj = ts_[j].nodes;
      if (nj > left || !reach_[j][static_cast<size_t>(left - nj)]) continue;
      const TemplateTerms& x = terms_[j];
      ++counts_[j];
      descend(j, left - nj, r + 1, inv_t + x.inv_t, a_over_t + x.a_over_t, std::max(w, x.sync_w),
              zero_t || x.zero_t, visit);
      --counts_[j];
    }
  }

  const PlanningProblem& p_;
  const std::vector<PipelineTemplate>& ts_;
  std::vector<TemplateTerms> terms_;
  int nodes_ = 0;
  long total_mb_ = 0;
  long order_ = 0;
  std::vector<std::vector<char>> reach_;
  std::vector<int> counts_;
};

/// X's pipelines (larger templates first, no nodes yet) with the batch distributed.
Instantiation evaluate_counts(const PlanningProblem& problem,
                              const std::vector<PipelineTemplate>& templates,
                              const std::vector<int>& counts) {
  Instantiation inst;
  inst.counts = counts;
  for (size_t j = counts.size(); j-- > 0;) {
    for (int c = 0; c < counts[j]; ++c) inst.pipelines.push_back({static_cast<int>(j), {}, 0});
  }
  distribute_batch(problem, templates, inst);
  return inst;
}

}  // namespace

Instantiation best_instantiation(const PlanningProblem& problem,
                                 const std::vector<PipelineTemplate>& templates, int nodes) {
  Enumerator en(problem, templates, nodes);
  // Pass 1: the X of least bound gives an incumbent (its exact time).
  std::vector<int> first, least;
  double least_bound = kInf;
  en.run([&](double bound, long order, const std::vector<int>& counts, int r) {
    if (order == 0) first = counts;
    if (en.distributable(r) && bound < least_bound) {
      least_bound = bound;
      least = counts;
    }
  });
  if (en.feasible() == 0) {
    throw InfeasibleError("oobleck: no combination of the templates (" +
                          std::to_string(templates.front().nodes) + ".." +
                          std::to_string(templates.back().nodes) + " nodes) uses exactly " +
                          std::to_string(nodes) + " nodes with >= f+1 pipelines");
  }
  if (least.empty()) evaluate_counts(problem, templates, first);  // throws the recommendation
  const double incumbent = evaluate_counts(problem, templates, least).iteration_time_s;
  // Pass 2: every X whose bound does not exceed the incumbent may be the optimum.
  std::vector<Candidate> open;
  en.run([&](double bound, long order, const std::vector<int>& counts, int r) {
    if (en.distributable(r) && bound <= incumbent * kSlack) open.push_back({bound, order, counts});
  });
  std::stable_sort(open.begin(), open.end(),
                   [](const Candidate& a, const Candidate& b) { return a.bound < b.bound; });
  Instantiation best;
  long best_order = -1;
  for (const Candidate& c : open) {
    if (best_order >= 0 && c.bound > best.iteration_time_s * kSlack) break;  // no later X can win
    Instantiation inst = evaluate_counts(problem, templates, c.counts);
    if (best_order < 0 || inst.iteration_time_s < best.iteration_time_s ||
        (inst.iteration_time_s == best.iteration_time_s && c.order < best_order)) {
      best = std::move(inst);
      best_order = c.order;
    }
  }
  return best;
}

}  // namespace loom::oobleck
