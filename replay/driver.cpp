#include "replay/driver.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <optional>

#include "core/errors.hpp"
#include "core/index.hpp"

namespace loom {

const char* to_string(TimeUse use) {
  switch (use) {
    case TimeUse::kTraining:
      return "training";
    case TimeUse::kRestart:
      return "restart";
    case TimeUse::kCheckpoint:
      return "checkpoint";
    case TimeUse::kReconfiguration:
      return "reconfiguration";
    case TimeUse::kLostWork:
      return "lost_work";
    case TimeUse::kIdle:
      return "idle";
  }
  return "?";
}

namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();

/// Trace events at one instant.
struct EventGroup {
  double time_s = 0;
  double notice_s = 0;  ///< the longest notice among its removals
  std::vector<std::string> removed, added;
};

std::vector<EventGroup> group_events(const AvailabilityTrace& trace, double duration_s) {
  std::vector<EventGroup> groups;
  for (const AvailabilityEvent& e : trace.events) {
    if (e.time_s >= duration_s) break;
    if (groups.empty() || groups.back().time_s != e.time_s) groups.push_back({e.time_s, 0, {}, {}});
    EventGroup& g = groups.back();
    if (e.change == AvailabilityChange::kRemove) {
      // A node that joins and leaves at one instant was never there.
      if (auto it = std::find(g.added.begin(), g.added.end(), e.node); it != g.added.end()) {
        g.added.erase(it);
        continue;
      }
      g.removed.push_back(e.node);
      g.notice_s = std::max(g.notice_s, e.notice_s);
    } else {
      g.added.push_back(e.node);
    }
  }
  return groups;
}

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : " ") + n;
  return out;
}

bool contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

class Replayer {
 public:
  Replayer(const AvailabilityTrace& trace, ReplayPolicy& policy, const ReplayOptions& o)
      : policy_(policy),
        alive_(trace.initial),
        given_(trace.initial),
        join_(o.join),
        node_ready_s_(o.node_ready_s) {
    r_.policy = policy.name();
    r_.trace = trace.source;
    r_.duration_s = o.duration_s > 0 ? o.duration_s : trace.duration_s;
    r_.global_batch = o.global_batch;
    groups_ = group_events(trace, r_.duration_s);
  }

  ReplayResult run() {
    begin(policy_.start(given_), "start", "");
    while (t_ < r_.duration_s && !stopped_) step();
    if (t_ < r_.duration_s) account(TimeUse::kIdle, r_.duration_s - t_);
    t_ = r_.duration_s;
    if (!stopped_) absorb(t_);
    commit_pending();  // the window closed without a failure: nothing more is lost
    rate(0);
    r_.events.push_back(
        {t_, "end", isize(alive_), "", 0, std::to_string(r_.iterations) + " iterations committed"});
    return std::move(r_);
  }

 private:
  /// A node that joined and has not entered the job yet.
  struct Joining {
    std::string node;
    double ready_s = 0;  ///< usable from then on
  };

  /// Whether a group removes a node the job uses (and so interrupts its work).
  bool interrupts(const EventGroup& g) const {
    return std::any_of(g.removed.begin(), g.removed.end(),
                       [&](const std::string& n) { return contains(given_, n); });
  }
  /// The first pending group that removes a node in use: what can interrupt work.
  const EventGroup* next_removal() const {
    for (size_t i = next_; i < groups_.size(); ++i)
      if (interrupts(groups_[i])) return &groups_[i];
    return nullptr;
  }
  double interrupt_at() const {
    const EventGroup* g = next_removal();
    return std::min(g ? g->time_s : kNever, r_.duration_s);
  }
  bool interrupt_due() const {
    return next_ < groups_.size() && groups_[next_].time_s <= t_ && interrupts(groups_[next_]);
  }
  bool any_ready() const {
    return std::any_of(joining_.begin(), joining_.end(),
                       [&](const Joining& j) { return j.ready_s <= t_; });
  }
  /// When something next changes for a job that cannot train: a trace event or a node
  /// becoming ready (bounded by the window's end).
  double next_wake() const {
    double wake = next_ < groups_.size() ? groups_[next_].time_s : kNever;
    for (const Joining& j : joining_)
      if (j.ready_s > t_) wake = std::min(wake, j.ready_s);
    return std::min(wake, r_.duration_s);
  }

  void account(TimeUse use, double seconds) {
    r_.time_in(use) += seconds;
    t_ += seconds;
  }

  /// Appends a throughput.csv step, merging steps at one instant and equal neighbours.
  void push_step(double time_s, double samples_per_s) {
    const int nodes = isize(alive_);
    if (!r_.throughput.empty()) {
      ThroughputStep& last = r_.throughput.back();
      if (last.nodes == nodes && last.samples_per_s == samples_per_s) return;
      time_s = std::max(time_s, last.time_s);
      if (last.time_s == time_s) {
        last = {time_s, nodes, samples_per_s};
        if (r_.throughput.size() >= 2) {  // merged back into the previous step
          const ThroughputStep& prev = r_.throughput[r_.throughput.size() - 2];
          if (prev.nodes == nodes && prev.samples_per_s == samples_per_s) r_.throughput.pop_back();
        }
        return;
      }
    }
    r_.throughput.push_back({time_s, nodes, samples_per_s});
  }
  /// The job trains at samples_per_s from now on (0: it does not).
  void rate(double samples_per_s) {
    absorb(t_);  // joins and drops before now come first in the step function
    push_step(t_, samples_per_s);
  }

  /// Applies, in order, the groups due by `limit` that the job does not see (joins;
  /// removals of nodes that have not entered), stopping at the first that removes a node
  /// in use: that one interrupts and reaches the policy (apply_changes).
  void absorb(double limit) {
    while (next_ < groups_.size() && groups_[next_].time_s <= limit && !interrupts(groups_[next_]))
      record_unseen(groups_[next_++]);
  }

  void record_unseen(const EventGroup& g) {
    if (g.removed.empty() && g.added.empty()) return;  // joined and left at one instant
    for (const std::string& n : g.removed) drop(n);
    for (const std::string& n : g.added) join(n, g.time_s);
    const double samples_per_s = r_.throughput.empty() ? 0 : r_.throughput.back().samples_per_s;
    push_step(g.time_s, samples_per_s);
    std::string detail = join_names(g.removed);
    if (!g.added.empty()) {
      detail += (detail.empty() ? "+" : " +") + join_names(g.added) + "; usable from " +
                std::to_string(g.time_s + node_ready_s_) + " s" +
                (join_ == JoinRule::kImmediate ? "" : ", enters at the next reconfiguration");
    }
    const std::string event = g.added.empty() ? "remove" : g.removed.empty() ? "add" : "change";
    r_.events.push_back(
        {g.time_s, event, isize(alive_), g.added.empty() ? "drop" : "wait", 0, detail});
  }
  /// A node that has not entered the job leaves.
  void drop(const std::string& node) {
    alive_.erase(std::find(alive_.begin(), alive_.end(), node));
    joining_.erase(std::find_if(joining_.begin(), joining_.end(),
                                [&](const Joining& j) { return j.node == node; }));
  }
  void join(const std::string& node, double time_s) {
    alive_.push_back(node);
    joining_.push_back({node, time_s + node_ready_s_});
  }

  void commit_pending() {
    r_.iterations += pending_iterations_;
    r_.samples_committed += pending_iterations_ * r_.global_batch;
    pending_iterations_ = 0;
    pending_training_s_ = 0;
  }

  void rollback(std::string& detail) {
    if (pending_iterations_ == 0) return;
    detail += (detail.empty() ? "" : "; ") + std::to_string(pending_iterations_) +
              " iterations since the last checkpoint lost";
    // Their time was training that left nothing durable: it becomes lost work.
    r_.time_in(TimeUse::kTraining) -= pending_training_s_;
    r_.time_in(TimeUse::kLostWork) += pending_training_s_;
    pending_iterations_ = 0;
    pending_training_s_ = 0;
  }

  /// Logs an action and starts it: its phases run from now.
  void begin(const Action& a, const std::string& event, const std::string& names) {
    absorb(t_);
    std::string detail = names;
    if (!a.detail.empty()) detail += (detail.empty() ? "" : "; ") + a.detail;
    if (a.rollback) rollback(detail);
    r_.events.push_back({t_, event, isize(alive_), a.name, a.cost_s(), detail});
    phases_.assign(a.phases.begin(), a.phases.end());
    action_name_ = a.name;
    if (a.stop) {
      stopped_ = true;
      r_.stop_reason = a.detail;
      r_.stopped_at_s = t_;
      rate(0);
    }
  }

  void step() {
    absorb(t_);
    if (!phases_.empty()) return run_phase();  // joins wait for the action to end
    if (interrupt_due() || (join_ == JoinRule::kImmediate && any_ready()))
      return apply_changes(false);
    const std::optional<double> iteration = policy_.iteration_s();
    if (!iteration) {  // nothing to train on: stop, or let nodes in and wait for more
      if (const std::string why = policy_.fatal(); !why.empty())
        return begin({"stop", {}, false, true, why}, "stop", "");
      if (any_ready()) return apply_changes(false);
      rate(0);
      account(TimeUse::kIdle, next_wake() - t_);
      return;  // the next step applies what is due then
    }
    const double end = t_ + *iteration;
    const EventGroup* removal = next_removal();
    if (removal && removal->notice_s > 0 && end > removal->time_s &&
        removal->time_s < r_.duration_s)
      return take_notice(*removal, *iteration);
    rate(r_.global_batch / *iteration);
    if (end <= interrupt_at()) return finish_iteration(*iteration);
    account(TimeUse::kLostWork, interrupt_at() - t_);
    if (t_ < r_.duration_s) apply_changes(true);
  }

  void finish_iteration(double seconds) {
    account(TimeUse::kTraining, seconds);
    ++pending_iterations_;
    pending_training_s_ += seconds;
    if (!policy_.uses_checkpoints()) commit_pending();
    if (std::optional<Action> after = policy_.after_iteration(t_)) {
      const bool checkpoint = std::any_of(after->phases.begin(), after->phases.end(),
                                          [](const Phase& p) { return p.checkpoint; });
      begin(*after, checkpoint ? "checkpoint" : "iteration", "");
    }
  }

  /// Runs the current phase until it completes or a removal cuts the action off.
  void run_phase() {
    rate(0);
    const Phase p = phases_.front();
    if (t_ + p.seconds <= interrupt_at()) {
      account(p.use, p.seconds);
      phases_.pop_front();
      if (p.checkpoint) commit_pending();
      return;
    }
    account(p.use, interrupt_at() - t_);
    phases_.clear();
    interrupted_ = action_name_;
    if (t_ < r_.duration_s) apply_changes(false);
  }

  /// A removal is announced and the next iteration cannot finish before it.
  void take_notice(const EventGroup& g, double iteration_s) {
    const double warning = std::max(g.time_s - g.notice_s, 0.0);
    if (warning > t_) {  // the iteration starts, and is aborted when the warning arrives
      rate(r_.global_batch / iteration_s);
      account(TimeUse::kLostWork, warning - t_);
    }
    rate(0);
    if (std::optional<Action> prepare = policy_.on_notice(t_, g.time_s)) {
      begin(*prepare, "notice", join_names(g.removed));
      while (!phases_.empty() && t_ < g.time_s) {  // what fits in the grace period
        const Phase p = phases_.front();
        phases_.pop_front();
        const double spend = std::min(p.seconds, g.time_s - t_);
        account(p.use, spend);
        if (spend == p.seconds && p.checkpoint) commit_pending();
      }
      phases_.clear();
    }
    account(TimeUse::kIdle, g.time_s - t_);
    apply_changes(false);
  }

  /// Applies every change due now and hands the policy, as one MembershipChange, the
  /// removals of nodes in use and every ready node that has not entered yet; starts the
  /// policy's action. Called only when a node in use left, under JoinRule::kImmediate,
  /// or while the policy cannot train: in each case ready nodes enter.
  void apply_changes(bool iteration_lost) {
    MembershipChange change;
    change.time_s = t_;
    while (next_ < groups_.size() && groups_[next_].time_s <= t_) {
      const EventGroup& g = groups_[next_++];
      if (!interrupts(g)) {
        record_unseen(g);
        continue;
      }
      for (const std::string& n : g.removed) {
        if (!contains(given_, n)) {
          drop(n);
          continue;
        }
        alive_.erase(std::find(alive_.begin(), alive_.end(), n));
        given_.erase(std::find(given_.begin(), given_.end(), n));
        change.removed.push_back(n);
      }
      for (const std::string& n : g.added) join(n, g.time_s);
    }
    for (auto it = joining_.begin(); it != joining_.end();) {
      if (it->ready_s > t_) {
        ++it;
        continue;
      }
      given_.push_back(it->node);
      change.added.push_back(it->node);
      it = joining_.erase(it);
    }
    if (change.removed.empty() && change.added.empty()) return;
    change.alive = given_;
    change.iteration_lost = iteration_lost;
    change.interrupted_action = interrupted_;
    interrupted_.clear();
    const std::string event = change.added.empty()     ? "remove"
                              : change.removed.empty() ? "add"
                                                       : "change";
    std::string names = join_names(change.removed);
    if (!change.added.empty()) names += (names.empty() ? "+" : " +") + join_names(change.added);
    rate(0);
    begin(policy_.on_change(change), event, names);
  }

  ReplayPolicy& policy_;
  ReplayResult r_;
  std::vector<EventGroup> groups_;
  size_t next_ = 0;
  std::vector<std::string> alive_;  ///< every node up, for the reports
  std::vector<std::string> given_;  ///< the nodes the policy has, in order of entry
  std::vector<Joining> joining_;    ///< up but not entered yet, in order of arrival
  JoinRule join_;
  double node_ready_s_;
  double t_ = 0;
  std::deque<Phase> phases_;  ///< the action in progress
  std::string action_name_;
  std::string interrupted_;  ///< the action a removal cut off, for the next change
  long long pending_iterations_ = 0;
  double pending_training_s_ = 0;
  bool stopped_ = false;
};

}  // namespace

JoinRule join_rule_from_string(const std::string& name) {
  if (name == "next-reconfiguration") return JoinRule::kNextReconfiguration;
  if (name == "immediate") return JoinRule::kImmediate;
  throw InputError("replay.join: '" + name + "' is not one of: next-reconfiguration, immediate");
}

ReplayResult run_replay(const AvailabilityTrace& trace, ReplayPolicy& policy,
                        const ReplayOptions& options) {
  if (!(options.node_ready_s >= 0) || !std::isfinite(options.node_ready_s))
    throw InputError("replay.node_ready: must be a finite number of seconds >= 0");
  if (options.global_batch <= 0)
    throw InputError("replay: the global batch must be > 0 samples per iteration");
  if (!(options.duration_s >= 0) || !std::isfinite(options.duration_s))
    throw InputError("replay: the duration must be a finite number >= 0");
  if (options.duration_s == 0 && trace.duration_s <= 0)
    throw InputError(trace.source + ": the trace has no duration; give --hours");
  return Replayer(trace, policy, options).run();
}

}  // namespace loom
