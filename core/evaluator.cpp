#include "core/evaluator.hpp"

#include <algorithm>
#include <deque>
#include <optional>

#include "core/errors.hpp"
#include "core/index.hpp"
#include "core/matching.hpp"
#include "core/overloaded.hpp"
#include "core/ring.hpp"

namespace loom {
namespace {

/// Runs each rank as far as it can; a rank blocks on a Recv whose Send has not been
/// reached, or on a Collective not all members have reached. Woken ranks go back on the
/// worklist. Each op is processed once: O(ops + collective ring steps).
class ListScheduler {
 public:
  ListScheduler(const Schedule& schedule, const Cluster& cluster, const Matching* matching)
      : schedule_(schedule),
        cluster_(cluster),
        matching_(lent_or_matched(matching, owned_matching_, schedule)),
        pos_(schedule.num_ranks(), 0),
        clock_(schedule.num_ranks(), 0.0),
        arrived_(matching_.instances.ssize(), 0),
        waiting_at_(schedule.num_ranks()),
        async_queue_(schedule.num_ranks()),
        async_ends_(schedule.num_ranks()),
        async_issued_(schedule.num_ranks(), 0),
        waiting_async_(schedule.num_ranks(), 0) {
    timeline_.timings.resize(schedule.num_ranks());
    for (const RankId r : schedule.rank_ids()) timeline_.timings[r].resize(program(r).size());
  }

  Timeline run() {
    for (const RankId r : schedule_.rank_ids()) ready_.push_back(r);
    while (!ready_.empty()) {
      const RankId r = ready_.front();
      ready_.pop_front();
      advance(r);
    }
    report_deadlock();
    return std::move(timeline_);
  }

 private:
  const std::vector<Op>& program(RankId r) const { return schedule_.programs[r]; }
  OpTiming& timing(OpRef ref) { return timeline_.at(ref); }
  bool reached(OpRef ref) const { return pos_[ref.rank] > ref.index; }
  int gpu(RankId rank) const { return schedule_.ranks[rank].gpu; }
  /// A flow between two ranks stands for the flows of the larger TP group's GPUs.
  int pair_tp(RankId a, RankId b) const {
    return std::max(schedule_.ranks[a].tp, schedule_.ranks[b].tp);
  }

  /// Executes rank r's ops until it blocks or finishes.
  void advance(RankId r) {
    const auto& ops = program(r);
    std::size_t& i = pos_[r];
    double& clock = clock_[r];
    while (i < ops.size()) {
      const OpRef here{r, i};
      const Op& op = schedule_.op(here);
      const auto* coll = std::get_if<Collective>(&op);
      const bool blocking_collective = coll && !coll->async;
      const bool done = std::visit(
          Overloaded{
              [&](const Compute& c) {
                if (!wait_for_async(r, async_needed_before(op, async_issued_[r]))) return false;
                timing(here) = {clock, clock + c.seconds};
                clock += c.seconds;
                return true;
              },
              [&](const Send& s) {
                // Eager: the transfer starts now and costs the rank nothing.
                timing(here) = {clock, clock + transfer_time(cluster_, gpu(r), gpu(s.peer), s.bytes,
                                                             pair_tp(r, s.peer))};
                const OpRef recv = peer(here);
                if (pos_[recv.rank] == recv.index) wake(recv.rank);
                return true;
              },
              [&](const Recv&) {
                const OpRef send = peer(here);
                if (!reached(send)) return false;
                const double arrival = timing(send).end_s;
                timing(here) = {clock, std::max(clock, arrival)};
                clock = std::max(clock, arrival);
                return true;
              },
              [&](const Collective& c) {
                if (c.async) return issue_async(here);
                return arrive_collective(here, c);
              },
              [&](const OptimizerStep& o) {
                if (!wait_for_async(r, async_needed_before(op, async_issued_[r]))) return false;
                timing(here) = {clock, clock + o.seconds};
                clock += o.seconds;
                return true;
              },
          },
          op);
      if (!done) return;
      // A completed collective has already moved every member (this rank included) past it.
      if (!blocking_collective) ++i;
    }
    wait_for_async(r, async_issued_[r]);  // the program's end waits for all of them
  }

  /// An async collective costs the rank nothing: note when it was issued, queue it on the
  /// rank's communication stream and start it if it can.
  bool issue_async(OpRef here) {
    const InstanceId instance = instance_of(here);
    timing(here).start_s = clock_[here.rank];
    ++arrived_[instance];
    ++async_issued_[here.rank];
    async_queue_[here.rank].push_back(instance);
    start_ready_async(instance);
    return true;
  }

  /// Runs async collectives whose members have all issued them and have nothing earlier on
  /// their communication stream, then those that this frees (core/schedule.hpp).
  void start_ready_async(InstanceId first) {
    std::vector<InstanceId> candidates = {first};
    while (!candidates.empty()) {
      const InstanceId instance = candidates.back();
      candidates.pop_back();
      const auto& members = members_of(instance);
      if (arrived_[instance] < isize(members)) continue;
      bool heads = true;
      for (const OpRef& m : members) {
        const auto& queue = async_queue_[m.rank];
        heads = heads && !queue.empty() && queue.front() == instance;
      }
      if (!heads) continue;
      const Collective& c = std::get<Collective>(schedule_.op(members[0]));
      double start = 0;
      for (const OpRef& m : members) {
        const auto& ends = async_ends_[m.rank];
        start = std::max({start, timing(m).start_s, ends.empty() ? 0.0 : ends.back()});
      }
      const double end = start + ring_timing(schedule_, cluster_, members, c).duration_s();
      for (const OpRef& m : members) {
        timing(m) = {start, end};
        async_ends_[m.rank].push_back(end);
        auto& queue = async_queue_[m.rank];
        queue.pop_front();
        if (!queue.empty()) candidates.push_back(queue.front());
        const std::size_t needed = waiting_async_[m.rank];
        if (needed > 0 && async_ends_[m.rank].size() >= needed) wake(m.rank);
      }
    }
  }

  /// True once the first `needed` of rank r's async collectives have ended (its clock moves
  /// to the last of those ends; one stream runs them in order, so that is the latest);
  /// false, with r waiting to be woken, while some have not started.
  bool wait_for_async(RankId r, std::size_t needed) {
    const auto& ends = async_ends_[r];
    const bool done = ends.size() >= needed;
    waiting_async_[r] = done ? 0 : needed;
    if (done && needed > 0) clock_[r] = std::max(clock_[r], ends[needed - 1]);
    return done;
  }

  InstanceId instance_of(OpRef ref) const { return matching_.instance_of(ref); }
  const std::vector<OpRef>& members_of(InstanceId instance) const {
    return matching_.members(instance);
  }
  OpRef peer(OpRef ref) const { return matching_.peer_of(ref); }
  void wake(RankId rank) { ready_.push_back(rank); }

  /// Returns true when the collective completed (and rank `here.rank` moved past it).
  bool arrive_collective(OpRef here, const Collective& c) {
    const InstanceId instance = instance_of(here);
    const auto& members = members_of(instance);
    int& arrived = arrived_[instance];
    // A blocked rank re-executes the same op when woken: count its arrival once.
    std::optional<InstanceId>& waiting_at = waiting_at_[here.rank];
    if (waiting_at != instance) {
      waiting_at = instance;
      ++arrived;
    }
    if (arrived < isize(members)) return false;
    complete_collective(members, c);
    for (const OpRef& member : members) {
      waiting_at_[member.rank].reset();
      ++pos_[member.rank];
      if (member.rank != here.rank) wake(member.rank);
    }
    return true;
  }

  /// The ring model of core/schedule.hpp, as the SimGrid backend runs it: start when the
  /// last member arrives, each member streams its steps to its successor, everyone ends
  /// when the slowest stream has arrived plus (steps - 1) x the largest hop latency.
  void complete_collective(const std::vector<OpRef>& members, const Collective& c) {
    double start = 0;
    for (const OpRef& member : members) start = std::max(start, clock_[member.rank]);
    const double end = start + ring_timing(schedule_, cluster_, members, c).duration_s();
    for (const OpRef& member : members) {
      double& clock = clock_[member.rank];
      timing(member) = {clock, std::max(clock, end)};
      clock = std::max(clock, end);
    }
  }

  void report_deadlock() const {
    throw_if_deadlocked(schedule_, pos_, "");
    for (const RankId r : schedule_.rank_ids()) {
      if (const auto& queue = async_queue_[r]; !queue.empty()) {
        const auto& members = members_of(queue.front());
        const OpRef op = *std::find_if(members.begin(), members.end(),
                                       [&](const OpRef& m) { return m.rank == r; });
        throw InfeasibleError("deadlock: rank " + to_string(r) + "'s async " +
                              to_string(schedule_.op(op), schedule_) +
                              " never starts: its members issue their async collectives in "
                              "different orders");
      }
    }
  }

  const Schedule& schedule_;
  const Cluster& cluster_;
  std::optional<Matching> owned_matching_;  ///< before matching_, which may refer to it
  const Matching& matching_;
  PerRank<std::size_t> pos_;
  PerRank<double> clock_;
  PerInstance<int> arrived_;
  PerRank<std::optional<InstanceId>> waiting_at_;  ///< the collective instance the rank waits in
  /// Per rank: its communication stream, the async instances issued and not yet run...
  PerRank<std::deque<InstanceId>> async_queue_;
  PerRank<std::vector<double>> async_ends_;  ///< ... the ends of those run, in order...
  PerRank<std::size_t> async_issued_;        ///< ... how many it has issued...
  /// ... and how many must have run before the waiting rank goes on (0: it does not wait).
  PerRank<std::size_t> waiting_async_;
  std::deque<RankId> ready_;
  Timeline timeline_;
};

}  // namespace

Timeline evaluate(const Schedule& schedule, const Cluster& cluster, const Matching* matching) {
  return ListScheduler(schedule, cluster, matching).run();
}

}  // namespace loom
