#include "sim/simgrid_backend.hpp"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <simgrid/kernel/Timer.hpp>
#include <simgrid/s4u/Comm.hpp>
#include <simgrid/s4u/Engine.hpp>
#include <simgrid/s4u/Host.hpp>
#include <span>
#include <stdexcept>
#include <unordered_map>
#include <xbt/config.hpp>

#include "core/errors.hpp"
#include "core/index.hpp"
#include "core/matching.hpp"
#include "core/ring.hpp"
#include "core/validate.hpp"
#include "sim/platform.hpp"
#include "sim/simgrid_kernel.hpp"

namespace loom {
namespace {
namespace sg = simgrid::s4u;

// SimGrid keeps one clock per process: a second Engine would start where the first ended.
bool g_engine_created = false;

/// SimGrid's size of a message. An empty message on a route with latency goes as one
/// byte: SimGrid 3.32 hands an empty message to a waiting permanent receiver at once,
/// skipping the latency the evaluator (and a real link) charges; one byte costs 1 /
/// bandwidth more, picoseconds. On a latency-free route empty stays empty (and free).
uint64_t simulated_bytes(double bytes, double route_latency) {
  constexpr double kMaxBytes = 1e18;  // far beyond any message, far below uint64 overflow
  if (!(bytes <= kMaxBytes)) {
    char text[64];
    std::snprintf(text, sizeof text, "%g", bytes);
    throw InfeasibleError(std::string("SimGrid backend: a message of ") + text +
                          " bytes is too large to simulate");
  }
  const auto size = static_cast<uint64_t>(std::llround(std::max(0.0, bytes)));
  return size == 0 && route_latency > 0 ? 1 : size;
}

/// One transfer a rank starts: where it goes, its simulated size and its rate cap.
struct Flow {
  sg::Host* to = nullptr;
  uint64_t bytes = 0;  ///< simulated size (checked before the run)
  double rate = 0;     ///< flow_rate_cap, 0 = none
};

/// What a running comm is, for its completion: a point-to-point Send's or one flow of a
/// collective instance. Owns the comm's handle until SimGrid is done with it.
struct Transfer {
  sg::CommPtr comm;
  std::optional<OpRef> send;  ///< the Send, or none for a collective's flow
  OpRef recv{};               ///< the Send's Recv, looked up while the sender's ops are at hand
  InstanceId instance{0};
};

/// One collective instance: its members arrive one by one; when the last is there every
/// member's flows start together, and the instance ends for all once every flow has
/// arrived and the per-step handshake latencies have passed (see core/schedule.hpp).
struct RingInstance {
  unsigned arrived = 0;
  size_t flows_in_flight = 0;
  double start_s = 0;
  double handshake_s = 0;
};

/// A rank's communication stream (Collective::async): runs the rank's async collectives in
/// program order, each once the rank has issued it.
struct CommStream {
  std::vector<size_t> ops;  ///< indices of the rank's async collectives, in order
  size_t issued_count = 0;  ///< by the rank so far
  size_t ended_count = 0;   ///< run to their end
  bool busy = false;        ///< one of them is running
};

/// Where a rank's program stands.
struct RankState {
  enum class Wait : uint8_t { kNone, kTimer, kRecv, kCollective, kAsync };
  Wait wait = Wait::kNone;
  size_t at = 0;        ///< the op the rank is at (program size once done)
  double op_start = 0;  ///< when the op it waits in began
  size_t async_needed = 0;
  size_t timed_end = 0;  ///< the op after those a timer is running
};

/// The run, driven by events in SimGrid's maestro: no actor per rank. A rank advances
/// through its program until an op must wait (a compute's end, a message, a collective,
/// its comm stream), and resumes from the timer or the comm completion that ends the
/// wait. SimGrid times every transfer as a real flow sharing the platform's links; the
/// computes are timers. Context switches between 16,384 actor stacks were most of an
/// unfolded run's cost (README, Benchmarks).
class Simulation {
 public:
  Simulation(const Schedule& schedule, const Cluster& cluster, const Matching* matching,
             std::function<void(double)> on_progress)
      : schedule_(schedule),
        cluster_(cluster),
        matching_(lent_or_matched(matching, owned_matching_, schedule)),
        on_progress_(std::move(on_progress)),
        total_ops_(schedule.num_ops()) {
    timeline_.timings.resize(schedule.num_ranks());
    for (const RankId r : schedule.rank_ids()) timeline_.timings[r].resize(program(r).size());
    ranks_.resize(schedule.num_ranks());
    for (const RankId r : schedule.rank_ids()) arrived_.emplace_back(program(r).size(), 0);
  }

  /// Creates the platform and every op's flows, then runs the simulation.
  void run(sg::Engine& engine) {
    check_placement(schedule_, cluster_);
    const sim::PerGpu<sg::Host*> hosts = sim::build_platform(cluster_, used_nodes());
    streams_.resize(schedule_.num_ranks());
    for (const RankId r : schedule_.rank_ids()) {
      host_.push_back(hosts[sim::GpuId{schedule_.ranks[r].gpu}]);
      for (size_t i = 0; i < program(r).size(); ++i) {
        const auto* c = std::get_if<Collective>(&program(r)[i]);
        if (c && c->async) streams_[r].ops.push_back(i);
      }
    }
    plan_flows();
    prepare_rings();
    sg::Activity::on_completion_cb([this](const sg::Activity& a) { on_transfer_done(a); });
    if (on_progress_) on_progress_(0);  // set up: the operations start
    for (const RankId r : schedule_.rank_ids()) advance(r);
    engine.run();
    retired_.clear();
  }

  /// Nodes that host a rank: only they are built (a what-if on a huge cluster with a
  /// small job should not pay for the idle part).
  std::set<int> used_nodes() const {
    std::set<int> used;
    for (const RankInfo& info : schedule_.ranks) used.insert(cluster_.node_of(info.gpu));
    return used;
  }

  Timeline take_timeline() {
    PerRank<std::size_t> position;
    for (const RankState& s : ranks_) position.push_back(s.at);
    throw_if_deadlocked(schedule_, position, " in SimGrid");
    return std::move(timeline_);
  }
  size_t activities() const { return activities_; }
  size_t comms_left_detached() const { return comms_left_detached_; }

 private:
  const std::vector<Op>& program(RankId r) const { return schedule_.programs[r]; }
  OpTiming& timing(OpRef ref) { return timeline_.at(ref); }
  static double now() { return sg::Engine::get_clock(); }

  Flow flow(RankId src, RankId dst, double bytes, double rate) const {
    return {host_[dst], simulated_bytes(bytes, latency(src, dst)), rate};
  }
  double latency(RankId src_rank, RankId dst_rank) const {
    return transfer_time(cluster_, schedule_.ranks[src_rank].gpu, schedule_.ranks[dst_rank].gpu, 0);
  }
  double rate_cap(RankId src_rank, RankId dst_rank) const {
    const RankInfo& src = schedule_.ranks[src_rank];
    const RankInfo& dst = schedule_.ranks[dst_rank];
    return flow_rate_cap(cluster_, src.gpu, dst.gpu, std::max(src.tp, dst.tp));
  }

  /// A Send's flow; made when it starts (plan_flows has checked every size).
  Flow send_flow(RankId r, const Send& send) const {
    return flow(r, send.peer, send.bytes, rate_cap(r, send.peer));
  }

  /// Every collective member's flows, and every Send's size checked, before the run (a
  /// message too large to simulate is refused before anything runs).
  void plan_flows() {
    collective_flows_.resize(schedule_.num_ranks());
    for (const RankId r : schedule_.rank_ids()) {
      for (size_t i = 0; i < program(r).size(); ++i) {
        if (const auto* send = std::get_if<Send>(&program(r)[i])) {
          send_flow(r, *send);
        } else if (const auto* c = std::get_if<Collective>(&program(r)[i])) {
          collective_flows_[r][i] = collective_flows(r, *c);
        }
      }
    }
  }

  /// A ring member streams to its successor (core/schedule.hpp); an all-to-all member sends
  /// bytes/n to every other member, each flow held to its share of the sender's rail
  /// (all_to_all_flow_cap).
  std::vector<Flow> collective_flows(RankId r, const Collective& c) const {
    const auto& members = schedule_.group_members(c.group);
    const int n = isize(members);
    const auto at =
        static_cast<size_t>(std::find(members.begin(), members.end(), r) - members.begin());
    if (c.kind != CollectiveKind::kAllToAll) {
      const RankId next = members[(at + 1) % members.size()];
      return {flow(r, next, ring_stream_bytes(c.kind, schedule_.ring_size(c.group), c.bytes),
                   rate_cap(r, next))};
    }
    const RankInfo& me = schedule_.ranks[r];
    const int peers = inter_node_peers(schedule_, cluster_, members)[at];
    std::vector<Flow> flows;
    for (const RankId peer : members) {
      if (peer == r) continue;
      const RankInfo& other = schedule_.ranks[peer];
      flows.push_back(
          flow(r, peer, ring_chunk_bytes(c.kind, n, c.bytes),
               all_to_all_flow_cap(cluster_, me.gpu, other.gpu, std::max(me.tp, other.tp), peers)));
    }
    return flows;
  }

  void prepare_rings() {
    rings_.resize(matching_.instances.ssize());
    for (const InstanceId i : rings_.ids()) {
      const auto& members = matching_.members(i);
      const auto& c = std::get<Collective>(schedule_.op(members[0]));
      if (ring_steps(c.kind, schedule_.ring_size(c.group)) == 0) continue;
      rings_[i].handshake_s = ring_timing(schedule_, cluster_, members, c).handshake_s;
    }
  }

  /// Starts one flow from rank `from`; SimGrid calls on_transfer_done when it arrives.
  void start(RankId from, const Flow& f, Transfer* transfer) {
    transfer->comm = sg::Comm::sendto_init();
    if (!sim::untrack_detached(*transfer->comm)) ++comms_left_detached_;
    if (f.rate > 0) sim::set_comm_rate(*transfer->comm, f.rate);
    transfer->comm->set_payload_size(f.bytes);
    transfer->comm->set_data(transfer);
    transfer->comm->set_source(host_[from]);
    transfer->comm->set_destination(f.to);  // both ends and a size: the comm starts...
    // ... except an empty one, which SimGrid holds back as unassigned.
    if (transfer->comm->get_state() != sg::Activity::State::STARTED) transfer->comm->start();
  }

  /// Runs rank r's program from where it stands until an op has to wait or it ends.
  void advance(RankId r) {
    RankState& s = ranks_[r];
    const auto& ops = program(r);
    CommStream& stream = streams_[r];
    s.wait = RankState::Wait::kNone;
    while (s.at < ops.size()) {
      const size_t i = s.at;
      const OpRef here{r, i};
      // A compute that waits for its prefetched parameters starts once they are here; an
      // optimizer step once the rank's async collectives have ended.
      if (const size_t needed = async_needed_before(ops[i], stream.issued_count);
          stream.ended_count < needed) {
        s.wait = RankState::Wait::kAsync;
        s.async_needed = needed;
        return;
      }
      const double t0 = now();
      if (std::holds_alternative<Compute>(ops[i])) {
        // Back-to-back computes touch nothing another rank sees: one timer for the whole
        // run, each op's times by arithmetic.
        const size_t end = compute_run_end(ops, i);
        double t = t0;
        for (size_t k = i; k < end; ++k) {
          const double from = t;
          if (const double seconds = std::get<Compute>(ops[k]).seconds; seconds > 0) t += seconds;
          timeline_.timings[r][k] = {from, t};
        }
        ++activities_;
        if (sleep_until(r, t, end)) return;
        continue;
      }
      if (const auto* o = std::get_if<OptimizerStep>(&ops[i])) {
        ++activities_;
        const double end_s = t0 + std::max(0.0, o->seconds);
        timing(here) = {end_s - std::max(0.0, o->seconds), end_s};
        if (sleep_until(r, end_s, i + 1)) return;
        continue;
      }
      if (std::holds_alternative<Send>(ops[i])) {
        // Eager: the transfer starts now; its timing ends when the data arrives.
        timing(here).start_s = t0;
        start(r, send_flow(r, std::get<Send>(ops[i])),
              new Transfer{nullptr, here, matching_.peer_of(here), InstanceId{0}});
        ++activities_;
      } else if (std::holds_alternative<Recv>(ops[i])) {
        if (!arrived_[r][i]) {
          s.wait = RankState::Wait::kRecv;
          s.op_start = t0;
          return;
        }
        timing(here) = {t0, t0};
      } else {
        const auto& collective = std::get<Collective>(ops[i]);
        if (collective.async) {
          ++stream.issued_count;  // its comm stream runs and times it
          run_stream(r);
        } else if (ring_steps(collective.kind, schedule_.ring_size(collective.group)) > 0) {
          s.wait = RankState::Wait::kCollective;
          s.op_start = t0;
          arrive(here);
          return;
        } else {
          timing(here) = {t0, t0};
        }
      }
      count_done_op();
      ++s.at;
    }
    // The program's end waits for all of its async collectives.
    if (stream.ended_count < stream.issued_count) {
      s.wait = RankState::Wait::kAsync;
      s.async_needed = stream.issued_count;
    }
  }

  /// Ops [at, end) of rank r are timed and end at `t`: counts them done, at once if `t` is
  /// now (returns false), else when a timer fires at `t` (returns true: the rank waits).
  bool sleep_until(RankId r, double t, size_t end) {
    RankState& s = ranks_[r];
    if (!(t > now())) {
      for (size_t k = s.at; k < end; ++k) count_done_op();
      s.at = end;
      return false;
    }
    s.wait = RankState::Wait::kTimer;
    s.timed_end = end;
    // One SimGrid timer per date, not per rank: identical replicas end their computes at
    // the same instants, so SimGrid's timer heap (linked nodes, a cache miss per level)
    // holds a few dates rather than a timer for every rank.
    auto [sleepers, first] = sleepers_.try_emplace(t);
    sleepers->second.push_back(r);
    // [this, t] fits xbt::Task's inline storage: no allocation per timer.
    if (first) simgrid::kernel::timer::Timer::set(t, [this, t] { wake_sleepers(t); });
    return true;
  }

  /// The date t has come: every rank asleep until then has timed its ops and goes on.
  void wake_sleepers(double t) {
    const auto sleepers = sleepers_.extract(t);
    for (const RankId r : sleepers.mapped()) {
      RankState& woken = ranks_[r];
      for (size_t k = woken.at; k < woken.timed_end; ++k) count_done_op();
      woken.at = woken.timed_end;
      wake(r);
    }
  }

  void done_and_advance(RankId r) {
    count_done_op();
    ++ranks_[r].at;
    wake(r);
  }

  /// Rank r goes on at this instant. Its advance runs with those of every rank woken at
  /// the same instant, once SimGrid has delivered the instant's events (a timer at now):
  /// an unfolded run's identical replicas wake in thousands at once, and each advance
  /// starts with cache misses on its rank's state and next op, which a sweep of
  /// prefetches over a chunk of them at a time overlaps (README, Benchmarks). Nothing else
  /// happens in between at that simulated time: same timeline.
  void wake(RankId r) {
    woken_.push_back(r);
    if (instant_set_) return;
    instant_set_ = true;
    simgrid::kernel::timer::Timer::set(now(), [this] { advance_woken(); });
  }

  /// A rank woken while these advance (none today) queues a timer of its own at now.
  void advance_woken() {
    instant_set_ = false;
    going_on_.swap(woken_);
    std::sort(going_on_.begin(), going_on_.end());  // neighbours' data lie together
    // In chunks: the core keeps only so many misses in flight, and prefetches beyond that
    // are dropped (a whole instant's thousands of ranks at once gained nothing).
    for (size_t from = 0; from < going_on_.size(); from += kPrefetchChunk) {
      const std::span<const RankId> chunk(going_on_.data() + from,
                                          std::min(kPrefetchChunk, going_on_.size() - from));
      prefetch(chunk);
      for (const RankId r : chunk) advance(r);
    }
    going_on_.clear();
  }

  static constexpr size_t kPrefetchChunk = 16;

  /// The ranks' states, then their next ops and timings: the second pass loads only what
  /// the first prefetched.
  void prefetch(std::span<const RankId> ranks) const {
    for (const RankId r : ranks) {
      __builtin_prefetch(&ranks_[r]);
      __builtin_prefetch(&timeline_.timings[r]);
      __builtin_prefetch(&arrived_[r]);
    }
    for (const RankId r : ranks) {
      const size_t at = ranks_[r].at;
      const std::vector<Op>& ops = program(r);
      if (at >= ops.size()) continue;
      const char* op = reinterpret_cast<const char*>(&ops[at]);
      __builtin_prefetch(op);
      __builtin_prefetch(op + sizeof(Op) - 1);
      __builtin_prefetch(&timeline_.timings[r][at], 1);
      __builtin_prefetch(&arrived_[r][at]);
    }
  }

  /// The rank's stream takes its next issued async collective when it is free.
  void run_stream(RankId r) {
    CommStream& stream = streams_[r];
    if (stream.busy || stream.ended_count >= stream.issued_count) return;
    const size_t i = stream.ops[stream.ended_count];
    const auto& c = std::get<Collective>(program(r)[i]);
    if (ring_steps(c.kind, schedule_.ring_size(c.group)) == 0) {
      timing({r, i}) = {now(), now()};
      end_async(r);
      return;
    }
    stream.busy = true;
    arrive({r, i});
  }

  /// One async collective of rank r has ended: the stream takes the next, and the rank
  /// goes on if it was waiting for it.
  void end_async(RankId r) {
    CommStream& stream = streams_[r];
    stream.busy = false;
    ++stream.ended_count;
    run_stream(r);
    RankState& s = ranks_[r];
    if (s.wait == RankState::Wait::kAsync && stream.ended_count >= s.async_needed) advance(r);
  }

  /// A member reaches its collective; the last to arrive starts every member's flows.
  void arrive(OpRef member) {
    const InstanceId id = matching_.instance_of(member);
    RingInstance& instance = rings_[id];
    const auto& members = matching_.members(id);
    if (++instance.arrived < members.size()) return;
    instance.start_s = now();
    for (const OpRef m : members) {
      const std::vector<Flow>& flows = collective_flows_[m.rank].at(m.index);
      for (const Flow& f : flows) start(m.rank, f, new Transfer{nullptr, std::nullopt, {}, id});
      instance.flows_in_flight += flows.size();
      activities_ += flows.size();
    }
  }

  /// Every flow of the instance has arrived: after the handshakes, every member goes on.
  void end_instance(InstanceId id) {
    const RingInstance& instance = rings_[id];
    for (const OpRef m : matching_.members(id)) {
      if (std::get<Collective>(schedule_.op(m)).async) {
        timing(m) = {instance.start_s, now()};
        end_async(m.rank);
      } else {
        timing(m) = {ranks_[m.rank].op_start, now()};
        done_and_advance(m.rank);
      }
    }
  }

  void on_transfer_done(const sg::Activity& activity) {
    retired_.clear();  // handles of earlier completions: SimGrid is done with them
    auto* transfer = activity.get_data<Transfer>();
    if (transfer == nullptr) return;
    std::unique_ptr<Transfer> owned(transfer);
    retired_.push_back(std::move(transfer->comm));
    if (transfer->send) {
      const OpRef send = *transfer->send;
      timing(send).end_s = activity.get_finish_time();
      const OpRef recv = transfer->recv;
      arrived_[recv.rank][recv.index] = 1;
      RankState& receiver = ranks_[recv.rank];
      if (receiver.wait == RankState::Wait::kRecv && receiver.at == recv.index) {
        timing(recv) = {receiver.op_start, now()};
        done_and_advance(recv.rank);
      }
      return;
    }
    const InstanceId id = transfer->instance;
    RingInstance& instance = rings_[id];
    if (--instance.flows_in_flight > 0) return;
    if (instance.handshake_s > 0) {
      simgrid::kernel::timer::Timer::set(now() + instance.handshake_s,
                                         [this, id] { end_instance(id); });
    } else {
      end_instance(id);
    }
  }

  /// The end of the run of Compute ops that starts at `i` (i itself when ops[i] is not one);
  /// a compute that waits for the comm stream (Compute::async_pending) starts a run of its own.
  static size_t compute_run_end(const std::vector<Op>& ops, size_t i) {
    auto plain = [&](size_t k) {
      const auto* c = std::get_if<Compute>(&ops[k]);
      return c && c->async_pending < 0;
    };
    if (i >= ops.size() || !std::holds_alternative<Compute>(ops[i])) return i;
    size_t end = i + 1;
    while (end < ops.size() && plain(end)) ++end;
    return end;
  }

  void count_done_op() {
    if (on_progress_ && ++done_ops_ % std::max<size_t>(1, total_ops_ / 1000) == 0) {
      on_progress_(static_cast<double>(done_ops_) / static_cast<double>(total_ops_));
    }
  }

  const Schedule& schedule_;
  const Cluster& cluster_;
  std::optional<Matching> owned_matching_;  ///< before matching_, which may refer to it
  const Matching& matching_;
  PerRank<sg::Host*> host_;
  /// A collective op's flows, [rank][op index]: a ring member's one to its successor, an
  /// all-to-all member's one to every other member.
  PerRank<std::unordered_map<size_t, std::vector<Flow>>> collective_flows_;
  PerRank<std::vector<char>> arrived_;  ///< which Recvs have their message
  PerInstance<RingInstance> rings_;
  PerRank<CommStream> streams_;
  PerRank<RankState> ranks_;
  /// Handles of completed comms, released at the next completion (not inside their own).
  std::vector<sg::CommPtr> retired_;
  std::map<double, std::vector<RankId>> sleepers_;  ///< ranks asleep until a date, by date
  std::vector<RankId> woken_;                       ///< ranks that go on at this instant (wake)
  std::vector<RankId> going_on_;                    ///< those advance_woken is advancing
  bool instant_set_ = false;  ///< advance_woken's timer is set for this instant
  Timeline timeline_;
  size_t activities_ = 0;
  size_t comms_left_detached_ = 0;  ///< comms sim::untrack_detached could not take out
  std::function<void(double)> on_progress_;
  size_t total_ops_ = 0;
  size_t done_ops_ = 0;
};

void configure(sg::Engine& engine, const SimGridOptions& options) {
  const auto models = simgrid_network_models();
  if (std::find(models.begin(), models.end(), options.network_model) == models.end()) {
    throw InputError("unknown SimGrid network model '" + options.network_model +
                     "' (valid: CM02, LV08)");
  }
  engine.set_config("network/model:" + options.network_model);
  // Compute is timed sleeps on otherwise idle hosts: trace integration handles them
  // without re-solving the CPU sharing system at every event.
  engine.set_config("cpu/optim:TI");
  if (options.network_model == "CM02") {
    // No TCP window bound and no reverse-direction traffic: latency + size / bandwidth.
    // The window is made unbounding rather than 0: with 0, CM02 also drops a comm's own
    // rate cap (Comm::set_rate, the per-GPU rail share of cluster.hpp).
    engine.set_config("network/TCP-gamma:1e30");
    engine.set_config("network/crosstraffic:0");
  }
  for (const std::string& setting : options.extra_cfg) {
    // SimGrid aborts the process on a setting without a value: check the form first.
    const auto colon = setting.find(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == setting.size()) {
      throw InputError("--simgrid-cfg '" + setting +
                       "': expected KEY:VALUE, e.g. network/TCP-gamma:4194304");
    }
    try {
      engine.set_config(setting);
    } catch (const std::exception& e) {
      // SimGrid appends every known key to the message: keep its first line.
      const std::string what = e.what();
      throw InputError("--simgrid-cfg '" + setting + "': " + what.substr(0, what.find('\n')));
    }
  }
}

}  // namespace

std::vector<std::string> simgrid_network_models() {
  return {"CM02", "LV08"};
}

Timeline run_simgrid(const Schedule& schedule, const Cluster& cluster,
                     const SimGridOptions& options, SimGridStats* stats) {
  if (g_engine_created) throw std::logic_error("run_simgrid: SimGrid runs once per process");
  g_engine_created = true;
  const auto wall_start = std::chrono::steady_clock::now();

  // SimGrid's own logs are for its developers; Loom reports deadlocks itself (the
  // engine's deadlock notice is silenced, other critical messages still show).
  int argc = 3;
  char name[] = "loom";
  char quiet[] = "--log=root.thresh:critical";
  char no_deadlock_notice[] = "--log=ker_engine.app:file:/dev/null";
  char* argv[] = {name, quiet, no_deadlock_notice, nullptr};
  // SimGrid installs a SIGINT handler that prints every actor and exits 1; keep the
  // caller's (the CLI removes its staging folder and exits 130).
  struct sigaction caller_int {};
  sigaction(SIGINT, nullptr, &caller_int);
  sg::Engine engine(&argc, argv);
  sigaction(SIGINT, &caller_int, nullptr);
  configure(engine, options);

  Simulation simulation(schedule, cluster, options.matching, options.on_progress);
  simulation.run(engine);
  Timeline timeline = simulation.take_timeline();
  if (stats) {
    stats->activities = simulation.activities();
    stats->comms_left_detached = simulation.comms_left_detached();
    stats->wall_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  }
  return timeline;
}

}  // namespace loom
