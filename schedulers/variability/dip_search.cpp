// DIP schedule search step 1 (baseline-schedules.md §5): Monte Carlo tree search over the
// order of segments. A tree node is a prefix of the order of (microbatch, modality)
// units; a unit's position i gives all its chunk tasks priority n - i (here: position,
// lower first). Each expansion scores 10 random completions with the greedy dual-queue
// interleaving (dip.cpp) and backs up the mean reward s = T_root / T (the root order's
// makespan over the rollout's). Selection by UCB s^alpha + beta sqrt(ln N_x / N_v).
// [AMBIG] alpha, beta and the budget are not published: alpha = 1, beta = 0.1 (rewards
// are near 1), the budget from [schedule.dip] search_iterations / search_budget_s.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <iterator>
#include <limits>
#include <numeric>
#include <optional>
#include <random>

#include "core/errors.hpp"
#include "core/index.hpp"
#include "schedulers/variability/dip.hpp"

namespace loom {
namespace {

constexpr double kAlpha = 1.0;
constexpr double kBeta = 0.1;
constexpr int kRolloutsPerExpansion = 10;

using NodeId = Id<struct NodeTag>;
constexpr NodeId kRoot{0};

struct Node {
  std::optional<NodeId> parent;  ///< none at the root
  std::optional<DipUnit> unit;   ///< the unit this node appends to its parent's prefix
  std::vector<NodeId> children;
  std::vector<DipUnit> untried;
  int visits = 0;
  double reward = 0;  ///< sum of rollout rewards
};

class Search {
 public:
  Search(const std::vector<DipTasks>& replicas, const DipLayout& layout, int microbatches,
         int modalities, const PerPipelineRank<double>& static_bytes, double cap,
         std::uint64_t seed)
      : replicas_(replicas),
        layout_(layout),
        units_(microbatches * modalities),
        modalities_(modalities),
        static_(static_bytes),
        cap_(cap),
        rng_(seed) {}

  /// Makespan of a full unit order: the slowest replica under the greedy interleaving.
  double score(const std::vector<DipUnit>& order) {
    PerDipUnit<double> pos(isize(order));  // an order places every unit
    for (size_t i = 0; i < order.size(); ++i) pos[order[i]] = static_cast<double>(i);
    double worst = 0;
    for (const DipTasks& tasks : replicas_) {
      const DipOrder greedy = dip_greedy(tasks, layout_.chunks, layout_.ranks, static_, cap_,
                                         dip_priorities(tasks, layout_, pos));
      worst = std::max(worst, greedy.makespan_s);
    }
    return worst;
  }

  std::vector<DipUnit> run(int iterations, double budget_s, DipSearchStats* stats) {
    const auto start = std::chrono::steady_clock::now();
    // The root order is Fig 4.2c's: every encoder unit (all microbatches) before any LLM
    // unit, so encoder forwards win ties against LLM work.
    std::vector<DipUnit> root_order;
    const int microbatches = units_ / modalities_;
    for (int mod = 0; mod < modalities_; ++mod)
      for (int j = 0; j < microbatches; ++j) root_order.push_back(DipUnit{j * modalities_ + mod});
    try {
      root_t_ = score(root_order);
    } catch (const InfeasibleError&) {
      // Encoder activations of every microbatch exceed the memory cap before any LLM
      // backward frees memory: root at microbatch-major order instead (1F1B-like).
      std::iota(root_order.begin(), root_order.end(), DipUnit{0});
      root_t_ = score(root_order);
    }
    best_order_ = root_order;
    best_t_ = root_t_;
    nodes_.push_back(Node{});
    nodes_[kRoot].untried = root_order;
    int it = 0, rollouts = 0;
    double longest = 0;  // the slowest iteration so far: do not start one that would overrun
    for (; it < iterations; ++it) {
      const auto now = std::chrono::steady_clock::now();
      const double elapsed = std::chrono::duration<double>(now - start).count();
      if (elapsed + longest > budget_s) break;
      NodeId v = select();
      std::vector<DipUnit> prefix = prefix_of(v);
      if (!nodes_[v].untried.empty()) v = expand(v, prefix);
      double sum = 0;
      for (int k = 0; k < kRolloutsPerExpansion; ++k, ++rollouts) sum += rollout(prefix_of(v));
      for (std::optional<NodeId> x = v; x; x = nodes_[*x].parent) {
        nodes_[*x].visits += kRolloutsPerExpansion;
        nodes_[*x].reward += sum;
      }
      longest = std::max(
          longest, std::chrono::duration<double>(std::chrono::steady_clock::now() - now).count());
    }
    if (stats) {
      stats->iterations = it;
      stats->rollouts = rollouts;
      stats->seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      stats->initial_makespan_s = root_t_;
      stats->best_makespan_s = best_t_;
    }
    return best_order_;
  }

 private:
  NodeId select() {
    NodeId v = kRoot;
    while (nodes_[v].untried.empty() && !nodes_[v].children.empty()) {
      const Node& x = nodes_[v];
      double best = -std::numeric_limits<double>::infinity();
      NodeId pick = x.children.front();
      for (const NodeId c : x.children) {
        const Node& n = nodes_[c];
        const double s = n.reward / n.visits;
        const double ucb = std::pow(s, kAlpha) +
                           kBeta * std::sqrt(std::log(static_cast<double>(x.visits)) / n.visits);
        if (ucb > best) {
          best = ucb;
          pick = c;
        }
      }
      v = pick;
    }
    return v;
  }

  std::vector<DipUnit> prefix_of(NodeId v) const {
    std::vector<DipUnit> out;
    for (NodeId x = v; x != kRoot; x = *nodes_[x].parent) out.push_back(*nodes_[x].unit);
    return {out.rbegin(), out.rend()};
  }

  /// The units an order has not placed yet, ascending.
  std::vector<DipUnit> units_after(const std::vector<DipUnit>& order) const {
    std::vector<DipUnit> placed = order;
    std::ranges::sort(placed);
    std::vector<DipUnit> rest;
    std::ranges::set_difference(IdRange<DipUnit>(units_), placed, std::back_inserter(rest));
    return rest;
  }

  NodeId expand(NodeId v, std::vector<DipUnit> prefix) {
    auto& untried = nodes_[v].untried;
    const auto k = untried.begin() + static_cast<std::ptrdiff_t>(rng_() % untried.size());
    const DipUnit unit = *k;
    untried.erase(k);
    prefix.push_back(unit);
    const NodeId id = nodes_.next_id();
    nodes_.push_back({.parent = v,
                      .unit = unit,
                      .children = {},
                      .untried = units_after(prefix),
                      .visits = 0,
                      .reward = 0});
    nodes_[v].children.push_back(id);
    return id;
  }

  double rollout(std::vector<DipUnit> order) {
    std::vector<DipUnit> rest = units_after(order);
    for (size_t i = rest.size(); i > 1; --i)  // Fisher-Yates with the raw engine: portable
      std::swap(rest[i - 1], rest[rng_() % i]);
    order.insert(order.end(), rest.begin(), rest.end());
    double t = 0;
    try {
      t = score(order);
    } catch (const InfeasibleError&) {
      return 0;  // this order cannot run under the memory cap: the worst reward
    }
    if (t < best_t_) {
      best_t_ = t;
      best_order_ = order;
    }
    return root_t_ / t;
  }

  const std::vector<DipTasks>& replicas_;
  const DipLayout& layout_;
  int units_ = 0, modalities_ = 1;
  const PerPipelineRank<double>& static_;
  double cap_ = 0;
  std::mt19937_64 rng_;
  IdVector<NodeId, Node> nodes_;
  std::vector<DipUnit> best_order_;
  double best_t_ = 0, root_t_ = 0;
};

}  // namespace

PerDipUnit<double> dip_search(const std::vector<DipTasks>& replicas, const DipLayout& layout,
                              int microbatches, int modalities,
                              const PerPipelineRank<double>& static_bytes, double cap_bytes,
                              int iterations, double budget_s, std::uint64_t seed,
                              DipSearchStats* stats) {
  Search search(replicas, layout, microbatches, modalities, static_bytes, cap_bytes, seed);
  const std::vector<DipUnit> order = search.run(iterations, budget_s, stats);
  PerDipUnit<double> position(isize(order));
  for (size_t i = 0; i < order.size(); ++i) position[order[i]] = static_cast<double>(i);
  return position;
}

}  // namespace loom
