#include "replay/driver.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <optional>

#include "core/errors.hpp"

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
      : policy_(policy), alive_(trace.initial) {
    r_.policy = policy.name();
    r_.trace = trace.source;
    r_.duration_s = o.duration_s > 0 ? o.duration_s : trace.duration_s;
    r_.global_batch = o.global_batch;
    groups_ = group_events(trace, r_.duration_s);
  }

  ReplayResult run() {
    begin(policy_.start(alive_), "start", "");
    while (t_ < r_.duration_s && !stopped_) step();
    if (t_ < r_.duration_s) account(TimeUse::kIdle, r_.duration_s - t_);
    t_ = r_.duration_s;
    commit_pending();  // the window closed without a failure: nothing more is lost
    rate(0);
    r_.events.push_back({t_, "end", static_cast<int>(alive_.size()), "", 0,
                         std::to_string(r_.iterations) + " iterations committed"});
    return std::move(r_);
  }

 private:
  /// The first pending group with a removal: what can interrupt work.
  const EventGroup* next_removal() const {
    for (size_t i = next_; i < groups_.size(); ++i)
      if (!groups_[i].removed.empty()) return &groups_[i];
    return nullptr;
  }
  double interrupt_at() const {
    const EventGroup* g = next_removal();
    return std::min(g ? g->time_s : kNever, r_.duration_s);
  }
  double next_change() const {
    return std::min(next_ < groups_.size() ? groups_[next_].time_s : kNever, r_.duration_s);
  }
  bool change_due() const { return next_ < groups_.size() && groups_[next_].time_s <= t_; }

  void account(TimeUse use, double seconds) {
    r_.time_s[static_cast<size_t>(use)] += seconds;
    t_ += seconds;
  }

  /// Appends a throughput.csv step when the live node count or the rate changes.
  void rate(double samples_per_s) {
    const int nodes = static_cast<int>(alive_.size());
    if (!r_.throughput.empty()) {
      ThroughputStep& last = r_.throughput.back();
      if (last.nodes == nodes && last.samples_per_s == samples_per_s) return;
      if (last.time_s == t_) {
        last = {t_, nodes, samples_per_s};
        if (r_.throughput.size() >= 2) {  // merged back into the previous step
          const ThroughputStep& prev = r_.throughput[r_.throughput.size() - 2];
          if (prev.nodes == nodes && prev.samples_per_s == samples_per_s) r_.throughput.pop_back();
        }
        return;
      }
    }
    r_.throughput.push_back({t_, nodes, samples_per_s});
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
    r_.time_s[static_cast<size_t>(TimeUse::kTraining)] -= pending_training_s_;
    r_.time_s[static_cast<size_t>(TimeUse::kLostWork)] += pending_training_s_;
    pending_iterations_ = 0;
    pending_training_s_ = 0;
  }

  /// Logs an action and starts it: its phases run from now.
  void begin(const Action& a, const std::string& event, const std::string& names) {
    std::string detail = names;
    if (!a.detail.empty()) detail += (detail.empty() ? "" : "; ") + a.detail;
    if (a.rollback) rollback(detail);
    r_.events.push_back({t_, event, static_cast<int>(alive_.size()), a.name, a.cost_s(), detail});
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
    if (!phases_.empty()) return run_phase();  // joins wait for the action to end
    if (change_due()) return apply_changes(false);
    const std::optional<double> iteration = policy_.iteration_s();
    if (!iteration) {  // nothing to train on: stop, or wait for the next change
      if (const std::string why = policy_.fatal(); !why.empty())
        return begin({"stop", {}, false, true, why}, "stop", "");
      rate(0);
      account(TimeUse::kIdle, next_change() - t_);
      if (t_ < r_.duration_s) apply_changes(false);
      return;
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

  /// Applies every change due now as one MembershipChange and starts the policy's action.
  void apply_changes(bool iteration_lost) {
    const std::vector<std::string> before = alive_;
    while (change_due()) {
      const EventGroup& g = groups_[next_++];
      for (const std::string& n : g.removed)
        alive_.erase(std::find(alive_.begin(), alive_.end(), n));
      for (const std::string& n : g.added) alive_.push_back(n);
    }
    MembershipChange change;
    change.time_s = t_;
    for (const std::string& n : before)
      if (!contains(alive_, n)) change.removed.push_back(n);
    for (const std::string& n : alive_)
      if (!contains(before, n)) change.added.push_back(n);
    change.alive = alive_;
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
  std::vector<std::string> alive_;
  double t_ = 0;
  std::deque<Phase> phases_;  ///< the action in progress
  std::string action_name_;
  std::string interrupted_;  ///< the action a removal cut off, for the next change
  long long pending_iterations_ = 0;
  double pending_training_s_ = 0;
  bool stopped_ = false;
};

}  // namespace

ReplayResult run_replay(const AvailabilityTrace& trace, ReplayPolicy& policy,
                        const ReplayOptions& options) {
  if (options.global_batch <= 0)
    throw InputError("replay: the global batch must be > 0 samples per iteration");
  if (!(options.duration_s >= 0) || !std::isfinite(options.duration_s))
    throw InputError("replay: the duration must be a finite number >= 0");
  if (options.duration_s == 0 && trace.duration_s <= 0)
    throw InputError(trace.source + ": the trace has no duration; give --hours");
  return Replayer(trace, policy, options).run();
}

}  // namespace loom
