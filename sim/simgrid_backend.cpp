#include "sim/simgrid_backend.hpp"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <map>
#include <set>
#include <simgrid/s4u/Actor.hpp>
#include <simgrid/s4u/Barrier.hpp>
#include <simgrid/s4u/Comm.hpp>
#include <simgrid/s4u/Engine.hpp>
#include <simgrid/s4u/Mailbox.hpp>
#include <simgrid/s4u/Semaphore.hpp>
#include <stdexcept>
#include <unordered_map>
#include <xbt/config.hpp>

#include "core/errors.hpp"
#include "core/index.hpp"
#include "core/matching.hpp"
#include "core/overloaded.hpp"
#include "core/ring.hpp"
#include "core/validate.hpp"
#include "sim/platform.hpp"

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

/// Where each op of a rank sends to and receives from. Mailboxes are per MessageChannel
/// (pair of ranks + layer edge) or per pair and collective group, so messages match in
/// program order per channel as the IR requires: a mailbox with a permanent receiver
/// queues messages in the order they were posted.
struct OpMailboxes {
  sg::Mailbox* out = nullptr;
  sg::Mailbox* in = nullptr;
  uint64_t out_bytes = 0;  ///< simulated size of what goes out (checked before the run)
  double out_rate = 0;     ///< rate cap of what goes out (flow_rate_cap), 0 = none
};

/// One collective instance: its members meet at `start` (the ring begins when all have
/// arrived) and at `end` (it finishes for all when every stream has arrived), then wait
/// out the per-step handshake latencies (see core/schedule.hpp).
struct RingInstance {
  sg::BarrierPtr start;
  sg::BarrierPtr end;
  double handshake_s = 0;
};

/// A rank's communication stream (Collective::async): an actor that runs the rank's async
/// collectives in program order, each once the rank has issued it.
struct CommStream {
  std::vector<size_t> ops;  ///< indices of the rank's async collectives, in order
  sg::SemaphorePtr issued = sg::Semaphore::create(0);
  sg::SemaphorePtr ended = sg::Semaphore::create(0);
  size_t issued_count = 0;  ///< by the rank so far...
  size_t waited_count = 0;  ///< ... and waited for
};

class Simulation {
 public:
  Simulation(const Schedule& schedule, const Cluster& cluster,
             std::function<void(double)> on_progress)
      : schedule_(schedule),
        cluster_(cluster),
        matching_(match_operations(schedule)),
        on_progress_(std::move(on_progress)),
        total_ops_(schedule.num_ops()) {
    timeline_.timings.resize(schedule.num_ranks());
    for (const RankId r : schedule.rank_ids()) timeline_.timings[r].resize(program(r).size());
    position_.resize(schedule.num_ranks(), 0);
    sent_.resize(schedule.num_ranks());
    for (const RankId r : schedule.rank_ids()) delivered_.emplace_back(program(r).size(), 0);
  }

  /// Creates the platform, the actors and their mailboxes, then runs the simulation.
  void run(sg::Engine& engine) {
    check_placement(schedule_, cluster_);
    const sim::PerGpu<sg::Host*> hosts = sim::build_platform(cluster_, used_nodes());
    PerRank<sg::ActorPtr> actors, comm_actors;
    streams_.resize(schedule_.num_ranks());
    for (const RankId r : schedule_.rank_ids()) {
      sg::Host* host = hosts[sim::GpuId{schedule_.ranks[r].gpu}];
      actors.push_back(sg::Actor::create("rank" + to_string(r), host, [this, r] { run_rank(r); }));
      CommStream& stream = streams_[r];
      for (size_t i = 0; i < program(r).size(); ++i) {
        const auto* c = std::get_if<Collective>(&program(r)[i]);
        if (c && c->async) stream.ops.push_back(i);
      }
      comm_actors.push_back(stream.ops.empty() ? actors.back()
                                               : sg::Actor::create("comm" + to_string(r), host,
                                                                   [this, r] { run_stream(r); }));
    }
    wire_mailboxes(actors, comm_actors);
    prepare_rings();
    if (on_progress_) on_progress_(0);  // set up: the operations start
    engine.run();
  }

  /// Nodes that host a rank: only they are built (a what-if on a huge cluster with a
  /// small job should not pay for the idle part).
  std::set<int> used_nodes() const {
    std::set<int> used;
    for (const RankInfo& info : schedule_.ranks) used.insert(cluster_.node_of(info.gpu));
    return used;
  }

  Timeline take_timeline() {
    report_failure();
    return std::move(timeline_);
  }
  size_t activities() const { return activities_; }

 private:
  const std::vector<Op>& program(RankId r) const { return schedule_.programs[r]; }
  OpTiming& timing(OpRef ref) { return timeline_.at(ref); }

  double latency(RankId src_rank, RankId dst_rank) const {
    return transfer_time(cluster_, schedule_.ranks[src_rank].gpu, schedule_.ranks[dst_rank].gpu, 0);
  }

  double rate_cap(RankId src_rank, RankId dst_rank) const {
    const RankInfo& src = schedule_.ranks[src_rank];
    const RankInfo& dst = schedule_.ranks[dst_rank];
    return flow_rate_cap(cluster_, src.gpu, dst.gpu, std::max(src.tp, dst.tp));
  }

  /// Posts an eager message (its receiver is permanent), held to the flow's rate cap.
  /// Never detached: SimGrid 3.32 keeps every detached comm in one list that each
  /// completion scans, which made unfolded runs quadratic in GPUs. The sender keeps the
  /// handle and waits for it: a point-to-point send once its receiver has it
  /// (release_delivered), a ring stream once the member has taken its predecessor's.
  static sg::CommPtr put(const OpMailboxes& boxes, void* payload) {
    sg::CommPtr comm = boxes.out->put_init(payload, boxes.out_bytes);
    if (boxes.out_rate > 0) comm->set_rate(boxes.out_rate);
    comm->start();
    return comm;
  }

  /// Every microbatch reuses its channels: look each name up once.
  sg::Mailbox* p2p_mailbox(const MessageChannel& c) {
    sg::Mailbox*& box = channel_mailboxes_[c];
    if (!box) {
      box = sg::Mailbox::by_name("p" + to_string(c.src) + ">" + to_string(c.dst) + ":" +
                                 to_string(c.pass) + std::to_string(c.producer) + ">" +
                                 std::to_string(c.boundary));
    }
    return box;
  }
  static sg::Mailbox* ring_mailbox(GroupId group, RankId src, RankId dst) {
    return sg::Mailbox::by_name("g" + to_string(group) + ":" + to_string(src) + ">" +
                                to_string(dst));
  }

  /// Resolves every op's mailboxes once, and makes each receiver the permanent receiver
  /// of its mailboxes so that sends are eager: the transfer starts when the Send is
  /// reached, whether or not the Recv has been posted.
  void wire_mailboxes(const PerRank<sg::ActorPtr>& actors,
                      const PerRank<sg::ActorPtr>& comm_actors) {
    mailboxes_.resize(schedule_.num_ranks());
    all_to_all_boxes_.resize(schedule_.num_ranks());
    for (const RankId r : schedule_.rank_ids()) {
      auto& boxes = mailboxes_[r];
      boxes.resize(program(r).size());
      for (size_t i = 0; i < program(r).size(); ++i) {
        std::visit(Overloaded{
                       [&](const Send& s) {
                         boxes[i].out = p2p_mailbox(channel_of(r, s.peer, s.tag));
                         boxes[i].out_bytes = simulated_bytes(s.bytes, latency(r, s.peer));
                         boxes[i].out_rate = rate_cap(r, s.peer);
                       },
                       [&](const Recv& rv) {
                         boxes[i].in = p2p_mailbox(channel_of(rv.peer, r, rv.tag));
                         boxes[i].in->set_receiver(actors[r]);
                       },
                       [&](const Collective& c) {
                         const auto& members = schedule_.group_members(c.group);
                         const auto n = members.size();
                         if (c.kind == CollectiveKind::kAllToAll) {
                           wire_all_to_all(r, i, c, (c.async ? comm_actors : actors)[r]);
                           return;
                         }
                         size_t k = 0;
                         while (members[k] != r) ++k;
                         boxes[i].out = ring_mailbox(c.group, r, members[(k + 1) % n]);
                         boxes[i].out_bytes = simulated_bytes(
                             ring_stream_bytes(c.kind, schedule_.ring_size(c.group), c.bytes),
                             latency(r, members[(k + 1) % n]));
                         boxes[i].out_rate = rate_cap(r, members[(k + 1) % n]);
                         boxes[i].in = ring_mailbox(c.group, members[(k + n - 1) % n], r);
                         boxes[i].in->set_receiver((c.async ? comm_actors : actors)[r]);
                       },
                       [](const Compute&) {},
                       [](const OptimizerStep&) {},
                   },
                   program(r)[i]);
      }
    }
  }

  /// An all-to-all's flows (core/schedule.hpp): one mailbox per ordered pair of members,
  /// each flow bytes/n, held to its share of the sender's rail (all_to_all_flow_cap).
  void wire_all_to_all(RankId r, size_t i, const Collective& c, const sg::ActorPtr& receiver) {
    const auto& members = schedule_.group_members(c.group);
    const int n = isize(members);
    const RankInfo& me = schedule_.ranks[r];
    const auto at = std::find(members.begin(), members.end(), r) - members.begin();
    const int peers = inter_node_peers(schedule_, cluster_, members)[static_cast<size_t>(at)];
    std::vector<OpMailboxes>& flows = all_to_all_boxes_[r][i];
    for (const RankId peer : members) {
      if (peer == r) continue;
      const RankInfo& other = schedule_.ranks[peer];
      OpMailboxes flow;
      flow.out = ring_mailbox(c.group, r, peer);
      flow.out_bytes = simulated_bytes(ring_chunk_bytes(c.kind, n, c.bytes), latency(r, peer));
      flow.out_rate =
          all_to_all_flow_cap(cluster_, me.gpu, other.gpu, std::max(me.tp, other.tp), peers);
      flow.in = ring_mailbox(c.group, peer, r);
      flow.in->set_receiver(receiver);
      flows.push_back(flow);
    }
  }

  void prepare_rings() {
    rings_.resize(matching_.instances.ssize());
    for (const InstanceId i : rings_.ids()) {
      const auto& members = matching_.members(i);
      const auto n = static_cast<unsigned>(isize(members));
      const auto& c = std::get<Collective>(schedule_.op(members[0]));
      if (ring_steps(c.kind, schedule_.ring_size(c.group)) == 0) continue;
      rings_[i] = {sg::Barrier::create(n), sg::Barrier::create(n),
                   ring_timing(schedule_, cluster_, members, c).handshake_s};
    }
  }

  /// The actor of rank r: its program, in order, with the IR's semantics.
  void run_rank(RankId r) {
    const auto& ops = program(r);
    const auto& boxes = mailboxes_[r];
    for (size_t i = 0; i < ops.size(); ++i) {
      const OpRef here{r, i};
      position_[r] = i;
      release_delivered(r);
      if (size_t end = compute_run_end(ops, i); end > i + 1) {
        // Back-to-back computes touch nothing another rank sees: one SimGrid activity
        // for the whole run, each op's times by arithmetic (one sleep, not end - i).
        wait_for_async(r, async_needed_before(ops[i], streams_[r].issued_count));
        double t = sg::Engine::get_clock();
        for (size_t k = i; k < end; ++k) {
          const double from = t;
          if (const double s = std::get<Compute>(ops[k]).seconds; s > 0) t += s;
          timeline_.timings[r][k] = {from, t};
        }
        if (t > sg::Engine::get_clock()) sg::this_actor::sleep_until(t);
        ++activities_;
        for (size_t k = i; k < end; ++k) count_done_op();
        i = end - 1;
        continue;
      }
      // A compute that waits for its prefetched parameters starts once they are here; an
      // optimizer step once the rank's async collectives have ended.
      wait_for_async(r, async_needed_before(ops[i], streams_[r].issued_count));
      const double start = sg::Engine::get_clock();
      std::visit(Overloaded{
                     [&](const Compute& c) {
                       if (c.seconds > 0) sg::this_actor::sleep_for(c.seconds);
                       ++activities_;
                     },
                     [&](const Send&) {
                       // The payload names the Send so the receiver can check the match
                       // and record when the data arrived.
                       sent_[r].push_back({i, put(boxes[i], const_cast<Op*>(&ops[i]))});
                       ++activities_;
                     },
                     [&](const Recv&) { receive(here, boxes[i].in); },
                     [&](const Collective& c) {
                       if (c.async)
                         issue_async(r);  // its comm stream runs and times it
                       else
                         ring(here, c, boxes[i]);
                     },
                     [&](const OptimizerStep& o) {
                       if (o.seconds > 0) sg::this_actor::sleep_for(o.seconds);
                       ++activities_;
                     },
                 },
                 ops[i]);
      // A send's timing ends when its data arrives (the receiver records that), an async
      // collective's is its comm stream's.
      // An optimizer step starts once the rank's async collectives have ended.
      const double now = sg::Engine::get_clock();
      const auto* c = std::get_if<Collective>(&ops[i]);
      if (const auto* o = std::get_if<OptimizerStep>(&ops[i]))
        timing(here) = {now - std::max(0.0, o->seconds), now};
      else if (std::holds_alternative<Send>(ops[i]))
        timing(here).start_s = start;
      else if (!(c && c->async))
        timing(here) = {start, now};
      count_done_op();
      // On a failure, stop but still wait for this rank's sends below: an actor that ends
      // with sends in flight would have SimGrid cancel them under their receivers. What
      // never arrives leaves the actors blocked, which ends the run (reported as failure_).
      if (!failure_.empty()) break;
    }
    wait_for_async(r, streams_[r].issued_count);  // the program's end waits for all of them
    for (const auto& [index, comm] : sent_[r]) comm->wait();  // eager: they are on their way
    sent_[r].clear();
    position_[r] = ops.size();
    // Every message to this rank has been consumed: release the mailboxes' hold on it.
    for (const OpMailboxes& b : boxes) {
      if (b.in) b.in->set_receiver(nullptr);
    }
    for (const auto& [index, flows] : all_to_all_boxes_[r]) {
      for (const OpMailboxes& flow : flows) flow.in->set_receiver(nullptr);
    }
  }

  /// A non-detached send stays on its sender's activity list in SimGrid, which every wait
  /// of the sender scans, until the sender waits for it: wait for the ones already
  /// received (done: one immediate simcall each), oldest first.
  void release_delivered(RankId r) {
    auto& sent = sent_[r];
    while (!sent.empty() && delivered_[r][sent.front().first]) {
      sent.front().second->wait();
      sent.pop_front();
    }
  }

  void issue_async(RankId r) {
    CommStream& stream = streams_[r];
    ++stream.issued_count;
    stream.issued->release();
  }

  /// Until the first `needed` of the rank's async collectives have ended (the stream runs
  /// them in order, so they end in order).
  void wait_for_async(RankId r, std::size_t needed) {
    CommStream& stream = streams_[r];
    for (; stream.waited_count < needed; ++stream.waited_count) stream.ended->acquire();
  }

  /// The actor of rank r's communication stream: each async collective once issued.
  void run_stream(RankId r) {
    CommStream& stream = streams_[r];
    const auto& boxes = mailboxes_[r];
    for (size_t i : stream.ops) {
      stream.issued->acquire();
      const OpRef here{r, i};
      const double start = ring(here, std::get<Collective>(program(r)[i]), boxes[i]);
      timing(here) = {start, sg::Engine::get_clock()};
      stream.ended->release();
      if (!failure_.empty()) return;
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

  void receive(OpRef here, sg::Mailbox* in) {
    Op* payload = nullptr;
    sg::CommPtr comm = in->get_async<Op>(&payload);
    comm->wait();
    const Op* expected = &schedule_.op(matching_.peer_of(here));
    if (payload != expected) {
      failure_ = "rank " + to_string(here.rank) + " op #" + std::to_string(here.index) +
                 " received a message it was not matched with";
      return;
    }
    timing(matching_.peer_of(here)).end_s = comm->get_finish_time();
    delivered_[matching_.peer_of(here).rank][matching_.peer_of(here).index] = true;
  }

  void count_done_op() {
    if (on_progress_ && ++done_ops_ % std::max<size_t>(1, total_ops_ / 1000) == 0) {
      on_progress_(static_cast<double>(done_ops_) / static_cast<double>(total_ops_));
    }
  }

  /// Ring collective (core/schedule.hpp): once all members are here, stream this
  /// member's steps to its successor and take the predecessor's stream; finish together.
  /// Returns when it started (all members were there).
  /// An all-to-all sends to every other member at once and takes from each of them.
  double ring(OpRef here, const Collective& c, const OpMailboxes& boxes) {
    if (ring_steps(c.kind, schedule_.ring_size(c.group)) == 0) return sg::Engine::get_clock();
    const RingInstance& instance = rings_[matching_.instance_of(here)];
    instance.start->wait();
    const double start = sg::Engine::get_clock();
    if (c.kind == CollectiveKind::kAllToAll) {
      const std::vector<OpMailboxes>& flows = all_to_all_boxes_[here.rank].at(here.index);
      std::vector<sg::CommPtr> sent;
      for (const OpMailboxes& flow : flows) sent.push_back(put(flow, const_cast<Collective*>(&c)));
      for (const OpMailboxes& flow : flows) flow.in->get<void>();
      sg::Comm::wait_all(sent);
      activities_ += 2 * flows.size();
    } else {
      const sg::CommPtr sent = put(boxes, const_cast<Collective*>(&c));
      boxes.in->get<void>();
      sent->wait();
    }
    instance.end->wait();
    if (instance.handshake_s > 0) sg::this_actor::sleep_for(instance.handshake_s);
    activities_ += 2;
    return start;
  }

  /// Turns an actor's failure or a deadlock (actors left blocked) into an InfeasibleError.
  void report_failure() const {
    if (!failure_.empty()) throw InfeasibleError("SimGrid backend: " + failure_);
    throw_if_deadlocked(schedule_, position_, " in SimGrid");
  }

  const Schedule& schedule_;
  const Cluster& cluster_;
  Matching matching_;
  PerRank<std::vector<OpMailboxes>> mailboxes_;
  /// An all-to-all op's flows, one per other member: [rank][op index].
  PerRank<std::unordered_map<size_t, std::vector<OpMailboxes>>> all_to_all_boxes_;
  std::map<MessageChannel, sg::Mailbox*> channel_mailboxes_;
  /// A rank's sends not yet released, oldest first, and which of its sends were received.
  PerRank<std::deque<std::pair<size_t, sg::CommPtr>>> sent_;
  PerRank<std::vector<char>> delivered_;
  PerInstance<RingInstance> rings_;
  PerRank<CommStream> streams_;
  Timeline timeline_;
  PerRank<std::size_t> position_;  ///< the op each rank is at (program size once done)
  std::string failure_;
  size_t activities_ = 0;
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

  Simulation simulation(schedule, cluster, options.on_progress);
  simulation.run(engine);
  Timeline timeline = simulation.take_timeline();
  if (stats) {
    stats->activities = simulation.activities();
    stats->wall_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  }
  return timeline;
}

}  // namespace loom
