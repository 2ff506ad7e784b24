// Divide and conquer with memoisation for the GPU-stage mapping (dissertation §2.4.1.2).
//
//   across(S', u, n):  layers [u, L) on n whole nodes in S' stages
//       = min over (s, k) of  in_node(s, u, k, M)  (+)  across(S' - s, k, n - 1)
//   in_node(s, u, v, g): layers [u, v) on g GPUs of one node in s stages
//       = min over (k, m) of  single(u, k, m)      (+)  in_node(s - 1, k, v, g - m)
// where (+) is Eq 2.1-2.3: T1 adds; k* is the slower half's slowest stage; T3 is the first
// half's T3 plus the second half's T1 when k* is in the first half, else the second's T3.
// Sub-problems are compared by T1 + T2 + T3 with N_b = 4S' (§2.4.1.2) and Eq 2.4 conquers
// single stages. n stages or fewer than n nodes would put a stage across nodes: excluded.
#include "schedulers/planners/oobleck/oobleck_mapper.hpp"

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <limits>
#include <numeric>
#include <string>

#include "core/index.hpp"
#include "core/resources.hpp"

namespace loom::oobleck {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double total_of(double t1, double t3, double tstar, int kstar, int stages) {
  // T2 of Eq 2.2 with N_b = 4S': (N_b - S' + k* - 1) t_k*.
  return t1 + (3.0 * stages + kstar - 1) * tstar + t3;
}

}  // namespace

double planned_time_s(const std::vector<double>& stage_times) {
  int kstar = 0;
  double tstar = stage_times.front();  // stage_times[kstar]
  double t1 = 0;
  for (int k = 0; const double t : stage_times) {
    t1 += t;
    if (t >= tstar) {  // ties go to the later stage
      kstar = k;
      tstar = t;
    }
    ++k;
  }
  const double t3 = std::accumulate(stage_times.begin() + kstar, stage_times.end(), 0.0);
  return total_of(t1, t3, tstar, kstar, isize(stage_times));
}

StageMapper::StageMapper(const PlanningProblem& problem)
    : p_(problem),
      L_(isize(problem.layers)),
      M_(problem.gpus_per_node),
      N_(std::min(problem.max_nodes, isize(problem.layers))) {
  pf_.assign(problem.layers.size() + 1, 0);
  pb_ = pm_ = par_ = pf_;
  for (size_t i = 0; i < problem.layers.size(); ++i) {
    const LayerCost& c = problem.layers[i];
    pf_[i + 1] = pf_[i] + c.forward_s;
    pb_[i + 1] = pb_[i] + c.backward_s;
    pm_[i + 1] = pm_[i] + c.memory_bytes;
    par_[i + 1] = par_[i] + c.allreduce_in_node_s;
  }
  const size_t l1 = pf_.size();  // L + 1 layer boundaries
  // The memo is (M^2 + N) (L+1)^2 entries: 5,000 layers on 8-GPU nodes are 13 GB.
  const double entries =
      (static_cast<double>(M_) * M_ + N_ + 1) * static_cast<double>(l1) * static_cast<double>(l1);
  check_memory_estimate("oobleck: the stage mapper's memo for " + std::to_string(L_) +
                            " layers on " + std::to_string(M_) + "-GPU nodes",
                        entries * sizeof(Sub),
                        "profile fewer, coarser layers (merge consecutive ones) or use fewer "
                        "GPUs per node");
  const auto m = static_cast<size_t>(M_);
  in_node_memo_.resize(m * m * l1 * l1);
  across_memo_.resize(l1 * l1 * (static_cast<size_t>(N_) + 1));
}

StageCost StageMapper::stage_cost(int u, int v, int d) const {
  const auto a = static_cast<size_t>(u), b = static_cast<size_t>(v);
  StageCost c;
  // Ring of d members: 2(d-1)/d times the two-member time; half in F, half in B.
  const double ring = d > 1 ? (par_[b] - par_[a]) * 2.0 * (d - 1) / d : 0;
  c.forward_s = (pf_[b] - pf_[a]) / d + ring / 2;
  c.backward_s = (pb_[b] - pb_[a]) / d + ring / 2;
  c.memory_bytes = (pm_[b] - pm_[a]) / d;
  c.fits = p_.gpu_memory_bytes <= 0 || c.memory_bytes <= p_.gpu_memory_bytes;
  return c;
}

StageMapper::Sub StageMapper::single(int u, int v, int d) const {
  const StageCost c = stage_cost(u, v, d);
  Sub s;
  const double t = c.fits ? c.forward_s + c.backward_s : kInf;
  s.t1 = s.t3 = s.tstar = t;  // Eq 2.4: T1 = T3 = F + B, T2 = 2(F + B)
  s.total = c.fits ? 4 * t : kInf;
  return s;
}

StageMapper::Sub StageMapper::combine(const Sub& a, int sa, const Sub& b, int sb) {
  Sub c;
  c.t1 = a.t1 + b.t1;       // Eq 2.1
  if (a.tstar > b.tstar) {  // Eq 2.3, k* = k1*; ties go to the later stage
    c.kstar = a.kstar;
    c.tstar = a.tstar;
    c.t3 = a.t3 + b.t1;
  } else {
    c.kstar = sa + b.kstar;
    c.tstar = b.tstar;
    c.t3 = b.t3;
  }
  c.total = total_of(c.t1, c.t3, c.tstar, c.kstar, sa + sb);
  return c;
}

void StageMapper::keep_faster(Sub& best, const Sub& a, int sa, const Sub& b, int sb,
                              int split_layer, int split_units) {
  if (b.total == kInf) return;
  Sub c = combine(a, sa, b, sb);
  if (c.total < best.total) {
    c.split_layer = split_layer;
    c.split_units = split_units;
    best = c;
  }
}

const StageMapper::Sub& StageMapper::in_node(int s, int u, int v, int g) {
  // Memo entry (s, g, u, v), row-major, in signed arithmetic: every term is >= 0.
  const std::ptrdiff_t l1 = std::ssize(pf_);  // L + 1 layer boundaries
  const std::ptrdiff_t entry = (((s - 1) * M_ + (g - 1)) * l1 + u) * l1 + v;
  Sub& memo = in_node_memo_[static_cast<size_t>(entry)];
  if (memo.total >= 0) return memo;
  if (s == 1) {
    memo = single(u, v, g);
    return memo;
  }
  Sub best;
  best.total = kInf;
  for (int m = 1; m <= g - (s - 1); ++m) {
    for (int k = u + 1; k <= v - (s - 1); ++k) {
      const Sub a = single(u, k, m);
      if (a.total == kInf) break;  // more layers on the same GPUs cannot fit either
      keep_faster(best, a, 1, in_node(s - 1, k, v, g - m), s - 1, k, m);
    }
  }
  memo = best;
  return memo;
}

const StageMapper::Sub& StageMapper::across(int S, int u, int n) {
  // Memo entry (S, u, n), row-major, in signed arithmetic: every term is >= 0.
  const std::ptrdiff_t l1 = std::ssize(pf_);  // L + 1 layer boundaries
  const std::ptrdiff_t entry = (S * l1 + u) * (N_ + 1) + n;
  Sub& memo = across_memo_[static_cast<size_t>(entry)];
  if (memo.total >= 0) return memo;
  if (n == 1) {
    memo = in_node(S, u, L_, M_);
    return memo;
  }
  Sub best;
  best.total = kInf;
  for (int s = 1; s <= std::min(M_, S - (n - 1)); ++s) {
    const int rest = S - s;
    if (rest > (n - 1) * M_) continue;
    for (int k = u + s; k <= L_ - rest; ++k) {
      const Sub& a = in_node(s, u, k, M_);
      if (a.total == kInf) break;  // memory only grows with k
      keep_faster(best, a, s, across(rest, k, n - 1), rest, k, s);
    }
  }
  memo = best;
  return memo;
}

void StageMapper::emit_in_node(int s, int u, int v, int g, PipelineNode node, int first_gpu,
                               std::vector<TemplateStage>& out) {
  const Sub& sub = in_node(s, u, v, g);
  const int k = s == 1 ? v : sub.split_layer;
  const int m = s == 1 ? g : sub.split_units;
  const StageCost c = stage_cost(u, k, m);
  out.push_back({u, k, m, node, first_gpu, c.forward_s, c.backward_s, c.memory_bytes});
  if (s > 1) emit_in_node(s - 1, k, v, g - m, node, first_gpu + m, out);
}

void StageMapper::emit_across(int S, int u, int n, PipelineNode node,
                              std::vector<TemplateStage>& out) {
  if (n == 1) return emit_in_node(S, u, L_, M_, node, 0, out);
  const Sub& sub = across(S, u, n);
  emit_in_node(sub.split_units, u, sub.split_layer, M_, node, 0, out);
  emit_across(S - sub.split_units, sub.split_layer, n - 1, node + 1, out);
}

PipelineTemplate StageMapper::best(int nodes) {
  PipelineTemplate t;
  t.nodes = nodes;
  if (nodes < 1 || nodes > N_) return t;
  int best_s = -1;
  double best_total = kInf;
  // §2.4.1.2 "Choosing the number of stages S": n <= S <= L, and at most M stages a node.
  for (int S = nodes; S <= std::min(L_, nodes * M_); ++S) {
    const Sub& sub = across(S, 0, nodes);
    if (sub.total < best_total) {
      best_total = sub.total;
      best_s = S;
    }
  }
  if (best_s < 0) return t;
  const Sub& sub = across(best_s, 0, nodes);
  emit_across(best_s, 0, nodes, PipelineNode{0}, t.stages);
  t.t1_s = sub.t1;
  t.t3_s = sub.t3;
  t.slowest_stage = sub.kstar;
  t.slowest_s = sub.tstar;
  t.planned_time_s = sub.total;
  return t;
}

}  // namespace loom::oobleck
