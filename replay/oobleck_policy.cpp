// Oobleck (dissertation §2.3-2.5): f+1 or more heterogeneous pipelines instantiated from
// precomputed templates use every live node; on a failure the affected pipelines are
// reinstantiated (simple / borrow nodes / merge, Fig 2.8), missing layers are copied from
// surviving replicas and the batch is redistributed (Eq 2.6) — no restart, only the
// iteration in flight is lost. Below (f+1) n0 nodes a full model replica set cannot be
// kept (§2.5: "can recover from failures until we have fewer than (f+1) n0 nodes"):
// Oobleck "stores the progress, informs the user, and exits", and the user restarts from
// it "once enough nodes have recovered to maintain f+1 replicas" (§2.3). The policy waits
// for that and restarts (`restart` seconds, nothing more lost); a job whose trace starts
// with too few nodes starts (free) when the first plan fits.
//
// Two modes:
//   planner     (simulation) S2's planner chooses the pipelines; the reconfiguration costs
//               `reconfiguration` seconds plus the layer copies on the inter-node links.
//   node count  (measured throughput) the table already reflects the planner's choice for
//               each node count; the artifact's measured reconfiguration time is the cost.
#include <map>
#include <optional>

#include "core/errors.hpp"
#include "core/index.hpp"
#include "replay/policies.hpp"

namespace loom {
namespace {

class OobleckPolicy final : public ReplayPolicy {
 public:
  explicit OobleckPolicy(const PolicySetup& s) : s_(s) {}

  std::string name() const override { return "oobleck"; }
  int nodes_in_use() const override { return nodes_; }

  Action start(const std::vector<std::string>& alive) override { return instantiate(alive); }

  std::optional<double> iteration_s() override {
    if (waiting_ || infeasible_ || stalled_) return std::nullopt;
    try {
      return (*s_.timer)(layout_);
    } catch (const InfeasibleError&) {
      infeasible_ = true;  // e.g. no measured throughput at this node count
      return std::nullopt;
    }
  }

  Action on_change(const MembershipChange& c) override {
    stalled_ = false;  // a join or a removal ends the artifact's stall (below)
    if (waiting_) return instantiate(c.alive);
    Action a = reinstantiate(c);
    // replay.concurrent_removals = "stall": the artifact simulator opens one rendezvous per
    // removal (oobleck_simulator.py, simulate_spot_instance_remove); when two overlap, the
    // second finds the first's nodes taken, assigns no pipelines and stops the job until
    // a node becomes ready or leaves.
    if (s_.params.concurrent_removals == "stall" && a.name == "reinstantiate" &&
        (c.removed.size() >= 2 || c.interrupted_action == "reinstantiate")) {
      stalled_ = true;
      a.detail += "; stalls until the next join or removal (replay.concurrent_removals)";
    }
    return a;
  }

 private:
  Action reinstantiate(const MembershipChange& c) {
    nodes_ = isize(c.alive);
    infeasible_ = false;
    if (const std::string why = too_few(nodes_); !why.empty()) return wait(why);
    const Phase fixed{TimeUse::kReconfiguration, s_.params.reconfiguration_s, false};
    if (!s_.oobleck) {
      layout_ = Layout{.pipelines = {{.nodes = nodes_}}};
      return {"reinstantiate", {fixed}, false, false, std::to_string(nodes_) + " nodes"};
    }
    std::vector<int> lost, added;
    for (const std::string& n : c.removed) lost.push_back(id_of_.at(n));
    for (const std::string& n : c.added) added.push_back(id(n));
    oobleck::Reinstantiation r;
    try {
      r = oobleck::reinstantiate(s_.oobleck->problem, s_.oobleck->templates, inst_, lost, added);
    } catch (const InfeasibleError& e) {
      return stop(e.what());
    }
    inst_ = r.next;
    layout_ = to_layout(inst_);
    double bytes = 0;
    for (const oobleck::LayerCopy& copy : r.copies) bytes += copy.bytes;
    const double copy_s =
        oobleck::copy_time_s(r.copies, s_.copy_link.bandwidth, s_.copy_link.latency);
    Action a{"reinstantiate", {fixed}, false, false, ""};
    if (copy_s > 0) a.phases.push_back({TimeUse::kReconfiguration, copy_s, false});
    a.detail = std::string(oobleck::to_string(r.kind)) + "; " + std::to_string(r.copies.size()) +
               " layer copies (" + std::to_string(bytes / 1e9) + " GB; " + std::to_string(copy_s) +
               " s); " + describe(inst_);
    return a;
  }

  int n0() const {
    if (!s_.oobleck) return s_.min_pipeline_nodes;
    int n = s_.oobleck->templates.front().nodes;
    for (const auto& t : s_.oobleck->templates) n = std::min(n, t.nodes);
    return n;
  }
  std::string too_few(int nodes) const {
    const int f = s_.params.fault_tolerance;
    if (nodes >= (f + 1) * n0()) return "";
    return "oobleck: " + oobleck::too_few_nodes_message(nodes, f, n0());
  }
  Action stop(const std::string& why) const { return {"stop", {}, false, true, why}; }
  /// Too few nodes for f+1 pipelines: the progress is kept, the pipelines are gone.
  Action wait(const std::string& why) {
    waiting_ = true;
    inst_ = {};
    return {"wait", {}, false, false, why + "; waits for nodes"};
  }

  /// Plans from scratch on `alive`: at the start, or after waiting for nodes (a restart
  /// from the stored progress once the job has trained).
  Action instantiate(const std::vector<std::string>& alive) {
    nodes_ = isize(alive);
    infeasible_ = false;
    waiting_ = false;
    if (const std::string why = too_few(nodes_); !why.empty()) return wait(why);
    std::string detail = std::to_string(nodes_) + " nodes";
    if (!s_.oobleck) {
      layout_ = Layout{.pipelines = {{.nodes = nodes_}}};
    } else {
      try {
        inst_ = oobleck::instantiate(s_.oobleck->problem, s_.oobleck->templates, ids(alive));
      } catch (const InfeasibleError& e) {
        return stop(e.what());
      }
      layout_ = to_layout(inst_);
      detail = describe(inst_);
    }
    if (!planned_before_) {
      planned_before_ = true;
      return {"instantiate", {}, false, false, detail};
    }
    return {"restart", {{TimeUse::kRestart, s_.params.restart_s, false}}, false, false, detail};
  }

  int id(const std::string& node) {
    auto [it, inserted] = id_of_.emplace(node, isize(id_of_));
    return it->second;
  }
  std::vector<int> ids(const std::vector<std::string>& nodes) {
    std::vector<int> out;
    for (const std::string& n : nodes) out.push_back(id(n));
    return out;
  }

  Layout to_layout(const oobleck::Instantiation& inst) const {
    Layout layout;
    layout.activation_checkpointing = true;  // §2.7.1, Table 2.1
    for (const oobleck::Pipeline& p : inst.pipelines) {
      const oobleck::PipelineTemplate& t = s_.oobleck->templates.at(p.template_index);
      PipelineLayout pl{t.nodes, {}, p.microbatches};
      for (const oobleck::TemplateStage& st : t.stages)
        pl.stage_layers.push_back(st.layer_end - st.layer_begin);
      layout.pipelines.push_back(pl);
    }
    return layout;
  }

  std::string describe(const oobleck::Instantiation& inst) const {
    std::map<int, int> by_nodes;  // pipeline size -> count
    for (const oobleck::Pipeline& p : inst.pipelines)
      ++by_nodes[s_.oobleck->templates.at(p.template_index).nodes];
    std::string out;
    for (const auto& [n, count] : by_nodes)
      out +=
          (out.empty() ? "" : " + ") + std::to_string(count) + " x " + std::to_string(n) + "-node";
    return out + " pipelines" + (inst.search == "exact" ? "" : " (best of two template sizes)");
  }

  PolicySetup s_;
  int nodes_ = 0;
  Layout layout_;
  bool infeasible_ = false;
  bool waiting_ = false;         ///< fewer than (f+1) n0 nodes: no pipelines
  bool planned_before_ = false;  ///< a later plan is a restart from the stored progress
  bool stalled_ = false;         ///< replay.concurrent_removals = "stall" after overlap
  oobleck::Instantiation inst_;
  std::map<std::string, int> id_of_;
};

}  // namespace

std::unique_ptr<ReplayPolicy> make_oobleck_policy(const PolicySetup& setup) {
  return std::make_unique<OobleckPolicy>(setup);
}

}  // namespace loom
