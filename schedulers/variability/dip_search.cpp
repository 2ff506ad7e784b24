// DIP schedule search step 1 (baseline-schedules.md §5): Monte Carlo tree search over the
// order of segments. A tree node is a prefix of the order of (microbatch, modality)
// units; a unit's position i gives all its chunk tasks priority n - i (here: position,
// lower first). Each expansion scores 10 random completions with the greedy dual-queue
// interleaving (dip.cpp) and backs up the mean reward s = T_root / T (the root order's
// makespan over the rollout's). Selection by UCB s^alpha + beta sqrt(ln N_x / N_v).
// [AMBIG] alpha, beta and the budget are not published: alpha = 1, beta = 0.1 (rewards
// are near 1), the budget from schedule.dip_search_iterations / dip_search_budget_s.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "core/errors.hpp"
#include "schedulers/variability/dip.hpp"

namespace loom {
namespace {

constexpr double kAlpha = 1.0;
constexpr double kBeta = 0.1;
constexpr int kRolloutsPerExpansion = 10;

struct Node {
  int parent = -1;
  int unit = -1;  ///< the unit this node appends to its parent's prefix
  std::vector<int> children;
  std::vector<int> untried;
  int visits = 0;
  double reward = 0;  ///< sum of rollout rewards
};

class Search {
 public:
  Search(const std::vector<std::vector<DipTask>>& replicas, const DipLayout& layout,
         int microbatches, int modalities, const std::vector<double>& static_bytes, double cap,
         std::uint64_t seed)
      : replicas_(replicas),
        layout_(layout),
        units_(microbatches * modalities),
        modalities_(modalities),
        static_(static_bytes),
        cap_(cap),
        rng_(seed) {}

  /// Makespan of a full unit order: the slowest replica under the greedy interleaving.
  double score(const std::vector<int>& order) {
    std::vector<double> pos(static_cast<size_t>(units_));
    for (size_t i = 0; i < order.size(); ++i)
      pos[static_cast<size_t>(order[i])] = static_cast<double>(i);
    double worst = 0;
    for (const auto& tasks : replicas_) {
      std::vector<double> prio;
      prio.reserve(tasks.size());
      for (const DipTask& t : tasks) {
        const int unit =
            t.microbatch * modalities_ + layout_.chunks[static_cast<size_t>(t.chunk)].modality;
        prio.push_back(pos[static_cast<size_t>(unit)] * 1e4 + t.chunk);
      }
      worst = std::max(
          worst, dip_greedy(tasks, layout_.chunks, layout_.ranks, static_, cap_, prio).makespan_s);
    }
    return worst;
  }

  std::vector<int> run(int iterations, double budget_s, DipSearchStats* stats) {
    const auto start = std::chrono::steady_clock::now();
    // The root order is Fig 4.2c's: every encoder unit (all microbatches) before any LLM
    // unit, so encoder forwards win ties against LLM work.
    std::vector<int> root_order;
    const int microbatches = units_ / modalities_;
    for (int mod = 0; mod < modalities_; ++mod)
      for (int j = 0; j < microbatches; ++j) root_order.push_back(j * modalities_ + mod);
    try {
      root_t_ = score(root_order);
    } catch (const InfeasibleError&) {
      // Encoder activations of every microbatch exceed the memory cap before any LLM
      // backward frees memory: root at microbatch-major order instead (1F1B-like).
      std::iota(root_order.begin(), root_order.end(), 0);
      root_t_ = score(root_order);
    }
    best_order_ = root_order;
    best_t_ = root_t_;
    nodes_.push_back(Node{});
    nodes_[0].untried = root_order;
    int it = 0, rollouts = 0;
    double longest = 0;  // the slowest iteration so far: do not start one that would overrun
    for (; it < iterations; ++it) {
      const auto now = std::chrono::steady_clock::now();
      const double elapsed = std::chrono::duration<double>(now - start).count();
      if (elapsed + longest > budget_s) break;
      int v = select();
      std::vector<int> prefix = prefix_of(v);
      if (!nodes_[static_cast<size_t>(v)].untried.empty()) v = expand(v, prefix);
      double sum = 0;
      for (int k = 0; k < kRolloutsPerExpansion; ++k, ++rollouts) sum += rollout(prefix_of(v));
      for (int x = v; x >= 0; x = nodes_[static_cast<size_t>(x)].parent) {
        nodes_[static_cast<size_t>(x)].visits += kRolloutsPerExpansion;
        nodes_[static_cast<size_t>(x)].reward += sum;
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
  int select() {
    int v = 0;
    while (nodes_[static_cast<size_t>(v)].untried.empty() &&
           !nodes_[static_cast<size_t>(v)].children.empty()) {
      const Node& x = nodes_[static_cast<size_t>(v)];
      double best = -std::numeric_limits<double>::infinity();
      int pick = x.children.front();
      for (int c : x.children) {
        const Node& n = nodes_[static_cast<size_t>(c)];
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

  std::vector<int> prefix_of(int v) const {
    std::vector<int> out;
    for (; v > 0; v = nodes_[static_cast<size_t>(v)].parent)
      out.push_back(nodes_[static_cast<size_t>(v)].unit);
    return {out.rbegin(), out.rend()};
  }

  int expand(int v, const std::vector<int>& prefix) {
    auto& untried = nodes_[static_cast<size_t>(v)].untried;
    const size_t k = static_cast<size_t>(rng_() % untried.size());
    const int unit = untried[k];
    untried.erase(untried.begin() + static_cast<std::ptrdiff_t>(k));
    Node child;
    child.parent = v;
    child.unit = unit;
    std::vector<char> used(static_cast<size_t>(units_), 0);
    for (int u : prefix) used[static_cast<size_t>(u)] = 1;
    used[static_cast<size_t>(unit)] = 1;
    for (int u = 0; u < units_; ++u)
      if (!used[static_cast<size_t>(u)]) child.untried.push_back(u);
    nodes_.push_back(std::move(child));
    const int id = static_cast<int>(nodes_.size()) - 1;
    nodes_[static_cast<size_t>(v)].children.push_back(id);
    return id;
  }

  double rollout(std::vector<int> order) {
    std::vector<char> used(static_cast<size_t>(units_), 0);
    for (int u : order) used[static_cast<size_t>(u)] = 1;
    std::vector<int> rest;
    for (int u = 0; u < units_; ++u)
      if (!used[static_cast<size_t>(u)]) rest.push_back(u);
    for (size_t i = rest.size(); i > 1; --i)  // Fisher-Yates with the raw engine: portable
      std::swap(rest[i - 1], rest[static_cast<size_t>(rng_() % i)]);
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

  const std::vector<std::vector<DipTask>>& replicas_;
  const DipLayout& layout_;
  int units_ = 0, modalities_ = 1;
  const std::vector<double>& static_;
  double cap_ = 0;
  std::mt19937_64 rng_;
  std::vector<Node> nodes_;
  std::vector<int> best_order_;
  double best_t_ = 0, root_t_ = 0;
};

}  // namespace

std::vector<double> dip_search(const std::vector<std::vector<DipTask>>& replicas,
                               const DipLayout& layout, int microbatches, int modalities,
                               const std::vector<double>& static_bytes, double cap_bytes,
                               int iterations, double budget_s, std::uint64_t seed,
                               DipSearchStats* stats) {
  Search search(replicas, layout, microbatches, modalities, static_bytes, cap_bytes, seed);
  const std::vector<int> order = search.run(iterations, budget_s, stats);
  std::vector<double> position(order.size());
  for (size_t i = 0; i < order.size(); ++i)
    position[static_cast<size_t>(order[i])] = static_cast<double>(i);
  return position;
}

}  // namespace loom
