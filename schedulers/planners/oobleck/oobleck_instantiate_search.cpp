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
//
// The enumeration itself is pruned with the same bound taken over every completion of a
// partial X (`left` nodes still to cover with templates 0..j): the completion adds at most
// left x max_i(1/t_i / n_i) to sum 1/t_i and at least left x min_i(a_i/t_i / n_i) to
// sum a_i/t_i, and the sync term only grows. A subtree whose bound exceeds the threshold
// (the least bound so far in pass 1, the incumbent's time in pass 2) holds no candidate,
// so pruning it changes nothing but the run time: the number of X grows like the
// partitions of N (astronomical at 200 nodes), the visited part stays small.
#include <algorithm>
#include <iterator>
#include <limits>
#include <span>

#include "core/errors.hpp"
#include "core/index.hpp"
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

PerTemplate<TemplateTerms> template_terms(const PlanningProblem& problem,
                                          const PerTemplate<PipelineTemplate>& templates) {
  PerTemplate<TemplateTerms> out;
  for (const PipelineTemplate& t : templates) {
    TemplateTerms x;
    const double a = t.t1_s + t.t3_s - (t.num_stages() - t.slowest_stage + 1) * t.slowest_s;
    x.zero_t = !(t.slowest_s > 0);
    if (!x.zero_t) {
      x.inv_t = 1 / t.slowest_s;
      x.a_over_t = a / t.slowest_s;
    }
    x.sync_w = busiest_node_sync_s(problem, t);
    out.push_back(x);
  }
  return out;
}

/// Search steps (partial X visited) one pass may take before the planner gives up.
constexpr long kMaxSearchSteps = 5'000'000;
/// Candidates pass 2 may hold for exact evaluation (memory: one count vector each).
constexpr size_t kMaxCandidates = 1'000'000;

/// The exact search ran past one of its limits (the fallback takes over).
class SearchLimit : public InfeasibleError {
 public:
  using InfeasibleError::InfeasibleError;
};

/// X the fallback evaluates exactly at most, in bound order.
constexpr size_t kMaxFallbackEvaluations = 64;

struct Candidate {
  double bound = 0;
  long order = 0;  ///< position in feasible_counts' order (the exhaustive tie-break)
  PerTemplate<int> counts;
};

/// Depth-first enumeration of X in feasible_counts' order: multisets of template indices
/// as non-increasing sequences, lexicographically ascending (the coin-change DP of Eq 2.5
/// appends an X when its largest template is processed, after the X it extends).
class Enumerator {
 public:
  Enumerator(const PlanningProblem& problem, const PerTemplate<PipelineTemplate>& templates,
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
    // reach_[j][n]: n nodes are a sum of sizes of templates 0..j (or n = 0). Row j is row
    // j-1 plus the sums that end in template j, filled with n ascending.
    IdVector<NodeCount, char> reach(nodes + 1, 0);
    for (const PipelineTemplate& t : ts_) {
      reach[NodeCount{0}] = 1;
      for (int n = t.nodes; n <= nodes; ++n)
        reach[NodeCount{n}] = reach[NodeCount{n}] || reach[NodeCount{n - t.nodes}];
      reach_.push_back(reach);
    }
    counts_ = PerTemplate<int>(ts_.ssize(), 0);
    // Per-node extremes over templates 0..j for the completion bound.
    double rho = 0, alpha = kInf;
    bool any_zero_t = false;
    for (const TemplateId j : ts_.ids()) {
      const double n = ts_[j].nodes;
      const TemplateTerms& x = terms_[j];
      rho = std::max(rho, x.inv_t / n);
      alpha = std::min(alpha, x.a_over_t / n);
      any_zero_t = any_zero_t || x.zero_t;
      rho_.push_back(rho);
      alpha_.push_back(alpha);
      any_zero_t_.push_back(any_zero_t);
    }
  }

  /// Calls visit(bound, order, counts, r) for every feasible X (Eq 2.5, >= f+1
  /// pipelines) except those in subtrees whose bound exceeds `threshold` (read as the
  /// search goes: the visitor may lower it). Throws InfeasibleError past kMaxSearchSteps.
  template <class Visit>
  void run(const double& threshold, Visit&& visit) {
    order_ = 0;
    steps_ = 0;
    threshold_ = &threshold;
    if (!ts_.empty()) descend(TemplateId{ts_.ssize() - 1}, nodes_, 0, 0, 0, 0, false, visit);
  }

  long feasible() const { return order_; }
  bool distributable(int pipelines) const {
    return p_.microbatch_size > 0 && p_.global_batch % p_.microbatch_size == 0 &&
           pipelines <= total_mb_;
  }

 private:
  template <class Visit>
  void descend(TemplateId max_j, int left, int r, double inv_t, double a_over_t, double w,
               bool zero_t, Visit& visit) {
    if (left == 0) {
      if (r < p_.fault_tolerance + 1) return;  // Requirement 2 of Eq 2.5
      const double relax = zero_t || inv_t <= 0 ? 0 : (total_mb_ + a_over_t) / inv_t;
      const double sync = r > 1 ? w * 2.0 * (r - 1) / r : 0;
      visit(std::max(0.0, relax) + sync, order_++, counts_, r);
      return;
    }
    const int n0 = ts_.front().nodes;
    if (r + left / n0 < p_.fault_tolerance + 1) return;  // cannot reach f+1 pipelines
    if (completion_bound(max_j, left, r, inv_t, a_over_t, w, zero_t) > *threshold_ * kSlack) return;
    if (++steps_ > kMaxSearchSteps) {
      throw SearchLimit("oobleck: instantiating " + std::to_string(nodes_) +
                        " nodes takes more than " + std::to_string(kMaxSearchSteps) +
                        " search steps over template combinations (the planner's limit); "
                        "use fewer nodes or a larger n_0");
    }
    for (TemplateId j{0}; j <= max_j; ++j) {
      const int nj = ts_[j].nodes;
      if (nj > left || !reach_[j][NodeCount{left - nj}]) continue;
      const TemplateTerms& x = terms_[j];
      ++counts_[j];
      descend(j, left - nj, r + 1, inv_t + x.inv_t, a_over_t + x.a_over_t, std::max(w, x.sync_w),
              zero_t || x.zero_t, visit);
      --counts_[j];
    }
  }

  /// A lower bound on the bound of every X completing this partial one (left > 0).
  double completion_bound(TemplateId max_j, int left, int r, double inv_t, double a_over_t,
                          double w, bool zero_t) const {
    double relax = 0;
    if (!zero_t && !any_zero_t_[max_j]) {
      const double num = total_mb_ + a_over_t + left * alpha_[max_j];
      if (num > 0) relax = num / (inv_t + left * rho_[max_j]);
    }
    const int r_min = r + 1;  // at least one more pipeline
    return relax + w * 2.0 * (r_min - 1) / r_min;
  }

  const PlanningProblem& p_;
  const PerTemplate<PipelineTemplate>& ts_;
  PerTemplate<TemplateTerms> terms_;
  PerTemplate<double> rho_, alpha_;  ///< max 1/t per node, min a/t per node, templates 0..j
  PerTemplate<char> any_zero_t_;
  const double* threshold_ = nullptr;
  long steps_ = 0;
  int nodes_ = 0;
  long total_mb_ = 0;
  long order_ = 0;
  PerTemplate<IdVector<NodeCount, char>> reach_;
  PerTemplate<int> counts_;
};

/// X's pipelines (larger templates first, no nodes yet) with the batch distributed.
Instantiation evaluate_counts(const PlanningProblem& problem,
                              const PerTemplate<PipelineTemplate>& templates,
                              const PerTemplate<int>& counts) {
  Instantiation inst;
  inst.counts = counts;
  for (int j = counts.ssize() - 1; j >= 0; --j) {
    const TemplateId t{j};
    for (int c = 0; c < counts[t]; ++c) inst.pipelines.push_back({t, {}, 0});
  }
  distribute_batch(problem, templates, inst);
  return inst;
}

/// Past the exact search's limits: every X with at most two distinct template sizes
/// (O(templates^2 x nodes) of them), the same bound, the best of the first
/// kMaxFallbackEvaluations in bound order evaluated exactly.
Instantiation two_size_instantiation(const PlanningProblem& problem,
                                     const PerTemplate<PipelineTemplate>& templates, int nodes) {
  const PerTemplate<TemplateTerms> terms = template_terms(problem, templates);
  const long total_mb =
      problem.microbatch_size > 0 && problem.global_batch % problem.microbatch_size == 0
          ? problem.global_batch / problem.microbatch_size
          : 0;
  std::vector<Candidate> open;
  for (const TemplateId a : templates.ids()) {
    for (TemplateId b = a; b < templates.next_id(); ++b) {
      const int na = templates[a].nodes, nb = templates[b].nodes;
      for (int ca = a == b ? 0 : 1; a == b ? ca == 0 : ca * na < nodes; ++ca) {
        const int rest = nodes - ca * na;
        if (rest <= 0 || rest % nb != 0) continue;
        const int cb = rest / nb;
        const int r = ca + cb;
        if (r < problem.fault_tolerance + 1 || r > total_mb) continue;
        const TemplateTerms &x = terms[a], &y = terms[b];
        const double inv = ca * x.inv_t + cb * y.inv_t;
        const bool zero = (ca > 0 && x.zero_t) || y.zero_t;
        const double relax =
            zero || inv <= 0 ? 0
                             : std::max(0.0, (total_mb + ca * x.a_over_t + cb * y.a_over_t) / inv);
        const double w = std::max(ca > 0 ? x.sync_w : 0.0, y.sync_w);
        Candidate c{relax + (r > 1 ? w * 2.0 * (r - 1) / r : 0), std::ssize(open),
                    PerTemplate<int>(templates.ssize(), 0)};
        c.counts[a] += ca;
        c.counts[b] += cb;
        open.push_back(std::move(c));
      }
    }
  }
  if (open.empty()) {
    throw InfeasibleError("oobleck: no combination of at most two template sizes uses exactly " +
                          std::to_string(nodes) +
                          " nodes with >= f+1 pipelines and one microbatch each");
  }
  std::stable_sort(open.begin(), open.end(),
                   [](const Candidate& p, const Candidate& q) { return p.bound < q.bound; });
  Instantiation best;
  for (size_t i = 0; i < open.size() && i < kMaxFallbackEvaluations; ++i) {
    if (i > 0 && open[i].bound > best.iteration_time_s * kSlack) break;
    Instantiation inst = evaluate_counts(problem, templates, open[i].counts);
    if (i == 0 || inst.iteration_time_s < best.iteration_time_s) best = std::move(inst);
  }
  return best;
}

Instantiation exact_instantiation(const PlanningProblem& problem,
                                  const PerTemplate<PipelineTemplate>& templates, int nodes) {
  Enumerator en(problem, templates, nodes);
  // Pass 1: the X of least bound gives an incumbent (its exact time).
  PerTemplate<int> first, least;
  double least_bound = kInf;
  en.run(least_bound, [&](double bound, long order, const PerTemplate<int>& counts, int r) {
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
  en.run(incumbent, [&](double bound, long order, const PerTemplate<int>& counts, int r) {
    if (!en.distributable(r) || bound > incumbent * kSlack) return;
    if (open.size() == kMaxCandidates) {
      throw SearchLimit("oobleck: instantiating " + std::to_string(nodes) +
                        " nodes leaves more than " + std::to_string(kMaxCandidates) +
                        " template combinations within the bound (the planner's limit); use "
                        "fewer nodes or a larger n_0");
    }
    open.push_back({bound, order, counts});
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

}  // namespace

Instantiation best_instantiation(const PlanningProblem& problem,
                                 const PerTemplate<PipelineTemplate>& templates, int nodes) {
  try {
    return exact_instantiation(problem, templates, nodes);
  } catch (const SearchLimit& limit) {
    Instantiation inst = two_size_instantiation(problem, templates, nodes);
    inst.search = std::string("two template sizes (") + limit.what() + ")";
    return inst;
  }
}

}  // namespace loom::oobleck
