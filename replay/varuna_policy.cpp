// Varuna-like: checkpoint-and-restart fault tolerance (dissertation §2.2 "Checkpointing";
// §2.7.1: synchronous checkpoints every 10 iterations to remote storage). Any failure
// stops the job; it restarts on the survivors from the last checkpoint with a re-planned
// pp x dp grid (job morphing), losing the work since that checkpoint. Nodes that do not
// fill a whole pipeline of the grid idle (the "broken grid" of §2.2).
#include <algorithm>
#include <optional>
#include <tuple>

#include "core/errors.hpp"
#include "core/index.hpp"
#include "replay/policies.hpp"

namespace loom {
namespace {

class VarunaPolicy final : public ReplayPolicy {
 public:
  explicit VarunaPolicy(const PolicySetup& s) : s_(s) {}

  std::string fatal() const override { return fatal_; }
  std::string name() const override { return "varuna-like"; }
  bool uses_checkpoints() const override { return true; }
  int nodes_in_use() const override { return replicas_ * depth_; }

  Action start(const std::vector<std::string>& alive) override {
    plan(isize(alive));
    return {"plan", {}, false, false, grid_text()};
  }

  std::optional<double> iteration_s() override {
    if (replicas_ == 0 || infeasible_) return std::nullopt;
    try {
      return (*s_.timer)(grid_layout(depth_, replicas_, s_));
    } catch (const TooFewNodesError&) {
      infeasible_ = true;  // wait for more nodes
      return std::nullopt;
    } catch (const InfeasibleError& e) {
      fatal_ = "varuna-like: " + std::string(e.what());
      infeasible_ = true;  // e.g. the grid does not fit memory: wait for more nodes
      return std::nullopt;
    }
  }

  std::optional<Action> after_iteration(double) override {
    if (++since_checkpoint_ < s_.params.checkpoint_interval) return std::nullopt;
    since_checkpoint_ = 0;
    return checkpoint("every " + std::to_string(s_.params.checkpoint_interval) + " iterations");
  }

  std::optional<Action> on_notice(double time_s, double removal_s) override {
    // Checkpoint ahead of the preemption; the driver cuts the save off if the grace period
    // is too short (the "fallback" of §2.7.3: work since the previous checkpoint is lost).
    if (since_checkpoint_ == 0) return std::nullopt;
    since_checkpoint_ = 0;
    return checkpoint("before the preemption, " + std::to_string(removal_s - time_s) +
                      " s of notice");
  }

  Action on_change(const MembershipChange& c) override {
    const int before = replicas_ * depth_;
    const std::pair<int, int> old_grid{depth_, replicas_};
    plan(isize(c.alive));
    if (replicas_ == 0) {
      return {"wait",
              {},
              !c.removed.empty(),
              false,
              "fewer nodes than one pipeline of " + std::to_string(s_.pipeline_depth)};
    }
    const bool restart_cut = c.interrupted_action == "restart";
    if (c.removed.empty() && replicas_ * depth_ <= before && !restart_cut) {
      std::tie(depth_, replicas_) = old_grid;  // not worth a restart: keep training as is
      return {"none", {}, false, false, "grid kept: " + grid_text()};
    }
    since_checkpoint_ = 0;
    Action a{"restart", {}, !c.removed.empty(), false, grid_text()};
    if (c.removed.empty() && !restart_cut) {  // morph onto the new nodes: save first, no loss
      a.phases.push_back({TimeUse::kCheckpoint, s_.params.checkpoint_save_s, true});
    }
    a.phases.push_back({TimeUse::kRestart, s_.params.restart_s, false});
    return a;
  }

 private:
  /// Job morphing: the fastest of the (up to 3) grids that use the most nodes; fixed
  /// depth when the setup says so.
  void plan(int nodes) {
    infeasible_ = false;
    depth_ = s_.pipeline_depth;
    replicas_ = nodes / depth_;
    if (s_.max_pipeline_depth <= 0 || replicas_ == 0) return;
    std::vector<std::pair<int, int>> grids;  // (-nodes used, depth)
    for (int d = s_.pipeline_depth; d <= std::min(nodes, s_.max_pipeline_depth); ++d)
      grids.emplace_back(-(nodes / d) * d, d);
    std::sort(grids.begin(), grids.end());
    double best = 0;
    for (size_t i = 0; i < grids.size() && i < 3; ++i) {
      const int d = grids[i].second;
      try {
        const double t = (*s_.timer)(grid_layout(d, nodes / d, s_));
        if (best == 0 || t < best) {
          best = t;
          depth_ = d;
          replicas_ = nodes / d;
        }
      } catch (const InfeasibleError&) {
        // a grid that does not fit: try the next
      }
    }
  }

  std::string grid_text() const {
    return "grid pp " + std::to_string(depth_) + " x dp " + std::to_string(replicas_);
  }
  Action checkpoint(const std::string& why) const {
    return {"checkpoint",
            {{TimeUse::kCheckpoint, s_.params.checkpoint_save_s, true}},
            false,
            false,
            why};
  }

  PolicySetup s_;
  int replicas_ = 0;
  int depth_ = 1;
  int since_checkpoint_ = 0;
  bool infeasible_ = false;
  std::string fatal_;  ///< the layout does not fit memory: more nodes would not help
};

}  // namespace

std::unique_ptr<ReplayPolicy> make_varuna_policy(const PolicySetup& setup) {
  return std::make_unique<VarunaPolicy>(setup);
}

}  // namespace loom
