// Bamboo-like: redundant computation (dissertation §2.2 "Redundant computation"; Thorpe
// et al., NSDI'23). Every iteration runs the `bamboo` schedule
// (schedulers/resilience/bamboo.cpp): each stage also runs its successor's forward and
// holds its model state, so the time and memory of redundancy come from the cost model
// through the schedule, at Bamboo's own microbatch size and without activation
// checkpointing (§2.7.1 and its footnote 2). When a node fails, its ring predecessor runs
// its stage too (failover, no restart): the pipeline is timed with that stage on the
// neighbour (schedule.failed_over), so the straggling pipeline sets the synchronous
// iteration. When two adjacent nodes of a pipeline have failed, the lost stage has no copy
// left: full restart on the survivors. Joined nodes are usable after a delay (the driver
// hands them over then: ReplayOptions::node_ready_s = replay.bamboo_join_delay) and
// replace failed-over slots or form new pipelines at the next iteration boundary (a global
// rendezvous); while it has no pipeline (too few nodes so far) the rendezvous forms them
// at once.
//
//   pipeline ring:  n0 -> n1 -> n2 -> n3      node k holds a copy of stage k+1 (mod S)
//   n2 fails:       n1 runs stages 1 and 2    (failover)
//   n1 fails too:   stage 1 and 2 both gone   (restart)
#include <algorithm>
#include <optional>
#include <span>

#include "core/errors.hpp"
#include "core/index.hpp"
#include "replay/policies.hpp"

namespace loom {
namespace {

struct Slot {
  std::string node;
  bool failed = false;
};

class BambooPolicy final : public ReplayPolicy {
 public:
  explicit BambooPolicy(const PolicySetup& s) : s_(s) {}

  std::string fatal() const override { return fatal_; }
  std::string name() const override { return "bamboo-like"; }
  int nodes_in_use() const override {
    int n = 0;
    for (const auto& p : pipelines_)
      for (const Slot& x : p)
        if (!x.failed) ++n;
    return n;
  }

  Action start(const std::vector<std::string>& alive) override {
    form(alive);
    return {"plan", {}, false, false, text()};
  }

  std::optional<double> iteration_s() override {
    if (pipelines_.empty() || infeasible_) return std::nullopt;
    try {
      return (*s_.timer)(layout());
    } catch (const TooFewNodesError&) {
      infeasible_ = true;  // wait for more nodes
      return std::nullopt;
    } catch (const InfeasibleError& e) {
      fatal_ =
          "bamboo-like: does not fit with its redundant copy (§2.7.1): " + std::string(e.what());
      infeasible_ = true;  // two stages' states do not fit (Table 2.2: OOM for GPT-3)
      return std::nullopt;
    }
  }

  std::optional<Action> after_iteration(double) override {
    // The Bamboo artifact's rendezvous rule (bamboo_simulator.py): after a step, spares
    // replace failed-over slots; when they cannot and failed-over nodes are over 5 % of
    // the active ones (each overloads its neighbour: 2 x failed / active), the pipelines
    // are re-formed over every live node (while they fill one); enough spares for a new
    // pipeline add one.
    const int failed = failed_slots();
    const int spares = isize(spares_);
    const bool replace = failed > 0 && spares > 0;
    const bool reform = failed > 0 && spares < failed &&
                        2.0 * failed > kOverloadedShare * nodes_in_use() &&
                        isize(live_nodes()) >= depth();
    const bool grow = failed == 0 && spares >= depth();
    if (!replace && !reform && !grow) return std::nullopt;
    const std::string before = text();
    if (reform)
      form(live_nodes());
    else
      refill();
    return Action{
        "rendezvous",
        {{TimeUse::kReconfiguration, s_.params.bamboo_reconfigure_s, false}},
        false,
        false,
        (reform ? "pipelines re-formed: " : "spare nodes used: ") + before + " -> " + text()};
  }

  Action on_change(const MembershipChange& c) override {
    for (const std::string& n : c.added) spares_.push_back(n);  // usable: the driver waited
    if (c.removed.empty()) {
      if (!pipelines_.empty() && !infeasible_)
        return {"none", {}, false, false, "spare until the next iteration boundary"};
      // Not training (no pipeline yet, or too few nodes measured): rendezvous now.
      if (pipelines_.empty())
        form(c.alive);
      else
        refill();
      if (pipelines_.empty())
        return {"wait", {}, false, false, "fewer nodes than one pipeline: " + text()};
      return {"rendezvous",
              {{TimeUse::kReconfiguration, s_.params.bamboo_reconfigure_s, false}},
              false,
              false,
              "pipelines formed: " + text()};
    }
    std::string adjacent;
    const int failed_before = failed_slots();
    for (const std::string& n : c.removed) {
      drop_spare(n);
      if (!fail(n) && adjacent.empty()) adjacent = n;
    }
    if (adjacent.empty() && failed_slots() == failed_before && c.interrupted_action.empty())
      return {"none", {}, false, false, "a spare left: " + text()};
    if (adjacent.empty() && c.interrupted_action != "restart") {
      return {"failover",
              {{TimeUse::kReconfiguration, s_.params.bamboo_failover_s, false}},
              false,
              false,
              text()};
    }
    form(c.alive);
    const std::string why =
        adjacent.empty() ? "the previous restart was cut off" : "adjacent failure at " + adjacent;
    return {"restart",
            {{TimeUse::kRestart, s_.params.restart_s, false}},
            false,
            false,
            why + "; " + text()};
  }

 private:
  void form(const std::vector<std::string>& nodes) {
    pipelines_.clear();
    spares_.clear();
    infeasible_ = false;
    const int depth = this->depth();
    auto next = nodes.begin();
    for (; nodes.end() - next >= depth; next += depth) {
      std::vector<Slot> p;
      for (const std::string& node : std::span(next, next + depth)) p.push_back({node, false});
      pipelines_.push_back(p);
    }
    spares_.assign(next, nodes.end());
  }

  /// Marks `node` failed; false when its ring neighbour has failed too (no copy left).
  bool fail(const std::string& node) {
    for (auto& p : pipelines_) {
      const size_t S = p.size();
      for (size_t k = 0; k < S; ++k) {
        if (p[k].node != node) continue;
        p[k].failed = true;
        if (S == 1) return false;
        return !p[(k + 1) % S].failed && !p[(k + S - 1) % S].failed;
      }
    }
    return true;  // a spare or joining node: nothing to fail over
  }

  void drop_spare(const std::string& node) {
    spares_.erase(std::remove(spares_.begin(), spares_.end(), node), spares_.end());
  }

  /// Spares replace failed slots first, then form new pipelines.
  void refill() {
    for (auto& p : pipelines_)
      for (Slot& slot : p)
        if (slot.failed && !spares_.empty()) {
          slot = {spares_.front(), false};
          spares_.erase(spares_.begin());
        }
    const int depth = this->depth();
    while (failed_slots() == 0 && isize(spares_) >= depth) {
      const auto taken = spares_.begin() + depth;
      std::vector<Slot> p;
      for (const std::string& node : std::span(spares_.begin(), taken)) p.push_back({node, false});
      spares_.erase(spares_.begin(), taken);
      pipelines_.push_back(p);
    }
    infeasible_ = false;
  }

  /// Failed-over nodes above this share of the active ones (x2: each overloads its
  /// neighbour) make Bamboo re-form its pipelines (the artifact's bamboo_simulator.py).
  static constexpr double kOverloadedShare = 0.05;

  int failed_slots() const {
    int n = 0;
    for (const auto& p : pipelines_)
      for (const Slot& slot : p) n += slot.failed;
    return n;
  }

  /// The nodes that train or wait as spares, pipelines first, in order.
  std::vector<std::string> live_nodes() const {
    std::vector<std::string> nodes;
    for (const auto& p : pipelines_)
      for (const Slot& slot : p)
        if (!slot.failed) nodes.push_back(slot.node);
    nodes.insert(nodes.end(), spares_.begin(), spares_.end());
    return nodes;
  }

  std::string text() const {
    return std::to_string(pipelines_.size()) + " pipelines of " + std::to_string(depth()) + ", " +
           std::to_string(failed_slots()) + " stages failed over, " +
           std::to_string(spares_.size()) + " spare";
  }

  /// The pipelines as the timer sees them: the bamboo schedule at Bamboo's microbatch
  /// size, each failed slot's stage on its ring predecessor.
  Layout layout() const {
    const int mbs = s_.params.bamboo_microbatch_size;
    Layout grid = grid_layout(depth(), isize(pipelines_), s_, mbs);
    grid.scheduler = "bamboo";
    grid.microbatch_size = mbs;
    grid.activation_checkpointing = false;  // footnote 2 of §2.7.1: it conflicts with RC
    grid.activation_factor = s_.params.bamboo_activation_factor;  // so TF32 activations
    for (size_t i = 0; i < pipelines_.size(); ++i) {
      PipelineLayout& p = grid.pipelines[i];
      for (int k = 0; const Slot& slot : pipelines_[i]) {
        if (slot.failed) p.failed_over.push_back(k);
        ++k;
      }
      p.nodes -= isize(p.failed_over);
    }
    return grid;
  }

  int depth() const {
    return s_.bamboo_pipeline_depth > 0 ? s_.bamboo_pipeline_depth : s_.pipeline_depth;
  }

  PolicySetup s_;
  std::vector<std::vector<Slot>> pipelines_;
  std::vector<std::string> spares_;
  bool infeasible_ = false;
  std::string fatal_;  ///< the layout does not fit memory: more nodes would not help
};

}  // namespace

std::unique_ptr<ReplayPolicy> make_bamboo_policy(const PolicySetup& setup) {
  return std::make_unique<BambooPolicy>(setup);
}

}  // namespace loom
