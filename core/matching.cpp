#include "core/matching.hpp"

#include <algorithm>
#include <cstddef>
#include <limits>
#include <map>
#include <optional>
#include <unordered_map>
#include <utility>

#include "core/errors.hpp"
#include "core/index.hpp"
#include "core/overloaded.hpp"

namespace loom {
namespace {

std::string describe(const Schedule& schedule, OpRef ref) {
  const Op& op = schedule.op(ref);
  return "rank " + to_string(ref.rank) + " op #" + std::to_string(ref.index) + " (" +
         to_string(op, schedule) + ")";
}

struct ChannelHash {
  size_t operator()(const MessageChannel& c) const {
    size_t h = std::hash<RankId>{}(c.src);
    for (int v : {c.dst.value(), static_cast<int>(c.pass), c.producer, c.boundary})
      h = h * 1000003u ^ std::hash<int>{}(v);
    return h;
  }
};

/// Sends and receives per channel. Hashed (a map keyed by channel was a fifth of a
/// 4,096-GPU evaluation), then visited in channel order so the first error reported does
/// not depend on the hash.
struct ChannelQueues {
  std::unordered_map<MessageChannel, size_t, ChannelHash> id;
  std::vector<MessageChannel> channel;
  std::vector<std::vector<OpRef>> sends, recvs;

  void add(const MessageChannel& c, OpRef ref, bool is_send) {
    auto [it, fresh] = id.try_emplace(c, channel.size());
    if (fresh) {
      channel.push_back(c);
      sends.emplace_back();
      recvs.emplace_back();
    }
    (is_send ? sends : recvs)[it->second].push_back(ref);
  }
  std::vector<size_t> in_channel_order() const {
    std::vector<size_t> order(channel.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return channel[a] < channel[b]; });
    return order;
  }
};

}  // namespace

MessageChannel channel_of(RankId src, RankId dst, const MessageTag& tag) {
  return {src, dst, tag.pass, tag.producer(), tag.boundary_layer};
}

const Matching& lent_or_matched(const Matching* lent, std::optional<Matching>& owned,
                                const Schedule& schedule) {
  return lent != nullptr ? *lent : owned.emplace(match_operations(schedule));
}

Matching match_operations(const Schedule& schedule) {
  Matching m;
  m.links.resize(schedule.num_ranks());

  // FIFO queues per channel: sends in src's program order, receives in dst's program
  // order; the k-th of each match.
  ChannelQueues queues;
  // Per group: each member's collective ops in program order.
  PerGroup<std::map<RankId, std::vector<OpRef>>> group_ops(schedule.groups.ssize());
  auto valid_peer = [&](RankId peer, RankId r) {
    return schedule.programs.contains(peer) && peer != r;
  };

  for (const RankId r : schedule.rank_ids()) {
    const auto& program = schedule.programs[r];
    if (program.size() > std::numeric_limits<std::uint32_t>::max())
      throw InfeasibleError("rank " + to_string(r) + " has over 4 G operations");
    m.links[r].assign(program.size(), {});
    for (std::size_t i = 0; i < program.size(); ++i) {
      const OpRef ref{r, i};
      std::visit(Overloaded{
                     [](const Compute&) {},
                     [&](const Send& s) {
                       if (!valid_peer(s.peer, r)) {
                         throw InfeasibleError(describe(schedule, ref) + ": invalid peer rank");
                       }
                       queues.add(channel_of(r, s.peer, s.tag), ref, true);
                     },
                     [&](const Recv& rv) {
                       if (!valid_peer(rv.peer, r)) {
                         throw InfeasibleError(describe(schedule, ref) + ": invalid peer rank");
                       }
                       queues.add(channel_of(rv.peer, r, rv.tag), ref, false);
                     },
                     [&](const Collective& c) {
                       if (!schedule.groups.contains(c.group)) {
                         throw InfeasibleError(describe(schedule, ref) + ": unknown group");
                       }
                       group_ops[c.group][r].push_back(ref);
                     },
                     [](const OptimizerStep&) {},
                 },
                 schedule.op(ref));
    }
  }

  const std::vector<size_t> order = queues.in_channel_order();
  for (size_t c : order) {
    const MessageChannel& channel = queues.channel[c];
    const auto& send_list = queues.sends[c];
    const auto& recv_list = queues.recvs[c];
    for (size_t k = 0; k < send_list.size(); ++k) {
      if (k >= recv_list.size()) {
        throw InfeasibleError(describe(schedule, send_list[k]) + ": no matching receive on rank " +
                              to_string(channel.dst) +
                              " (sends and receives between a pair "
                              "match in program order per layer edge)");
      }
      const OpRef s = send_list[k];
      const OpRef r = recv_list[k];
      const auto& send = std::get<Send>(schedule.op(s));
      const auto& recv = std::get<Recv>(schedule.op(r));
      if (!(send.tag == recv.tag)) {
        throw InfeasibleError(
            describe(schedule, r) + " takes message " + std::to_string(k + 1) + " that rank " +
            to_string(channel.src) + " sends it on this layer edge, " + describe(schedule, s) +
            ", which carries another microbatch or pass: rank " + to_string(channel.src) +
            " is missing a send before it, or sends in another order than rank " +
            to_string(channel.dst) +
            " receives (each receive takes the next message on its "
            "edge, in program order)");
      }
      if (send.bytes != recv.bytes) {
        throw InfeasibleError(describe(schedule, r) + " expects " + std::to_string(recv.bytes) +
                              " bytes but its message, " + describe(schedule, s) + ", has " +
                              std::to_string(send.bytes));
      }
      m.links[s.rank][s.index] = {r.rank.value(), static_cast<std::uint32_t>(r.index)};
      m.links[r.rank][r.index] = {s.rank.value(), static_cast<std::uint32_t>(s.index)};
    }
  }
  for (size_t c : order) {
    const auto& recv_list = queues.recvs[c];
    const size_t n_send = queues.sends[c].size();
    if (recv_list.size() > n_send) {
      throw InfeasibleError(describe(schedule, recv_list[n_send]) +
                            ": no matching send from rank " + to_string(queues.channel[c].src) +
                            " (it would wait forever)");
    }
  }

  for (const GroupId g : group_ops.ids()) {
    const auto& members = schedule.group_members(g);
    size_t count = 0;
    bool first = true;
    for (const RankId member : members) {
      const size_t n = group_ops[g].count(member) ? group_ops[g][member].size() : 0;
      if (first) count = n;
      first = false;
      if (n != count) {
        OpRef witness = group_ops[g].begin()->second.front();
        throw InfeasibleError(describe(schedule, witness) + ": collective group g" + to_string(g) +
                              " is reached " + std::to_string(count) + " time(s) by rank " +
                              to_string(members.front()) + " but " + std::to_string(n) +
                              " time(s) by rank " + to_string(member));
      }
    }
    for (const auto& [rank, ops] : group_ops[g]) {
      bool is_member = false;
      for (const RankId member : members) is_member = is_member || member == rank;
      if (!is_member) {
        throw InfeasibleError(describe(schedule, ops.front()) + ": rank is not in group g" +
                              to_string(g));
      }
    }
    for (size_t k = 0; k < count; ++k) {
      const InstanceId instance = m.instances.next_id();
      std::vector<OpRef> member_ops;
      for (const RankId member : members) {
        const OpRef ref = group_ops[g][member][k];
        member_ops.push_back(ref);
        m.links[ref.rank][ref.index] = {Matching::kInstance,
                                        static_cast<std::uint32_t>(instance.value())};
      }
      // The k-th collective of every member is one ring: an all-gather cannot meet a
      // reduce-scatter, nor a blocking member an async one.
      const auto& head = std::get<Collective>(schedule.op(member_ops.front()));
      for (const OpRef& ref : member_ops) {
        const auto& c = std::get<Collective>(schedule.op(ref));
        if (c.kind != head.kind || c.async != head.async) {
          throw InfeasibleError(describe(schedule, ref) + ": collective " + std::to_string(k) +
                                " of group g" + to_string(g) + " is " +
                                (c.async ? "an async " : "a ") + to_string(c.kind) + " here but " +
                                (head.async ? "an async " : "a ") + to_string(head.kind) + " on " +
                                describe(schedule, member_ops.front()));
        }
      }
      m.instances.push_back(std::move(member_ops));
    }
  }
  return m;
}

}  // namespace loom
