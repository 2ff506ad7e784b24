// A dependency-only run of the schedule (no time, no links): each rank advances while its
// next op can start, and each rank's communication stream runs its async collectives in
// order once every member has issued them (core/schedule.hpp). What is left when nothing moves is
// the deadlock, and the matching tells each stuck op's producer, so the message names it.
#include "core/schedule_stall.hpp"

#include <algorithm>
#include <cstddef>
#include <optional>
#include <variant>
#include <vector>

#include "core/errors.hpp"
#include "core/index.hpp"
#include "core/matching.hpp"

namespace loom {
namespace {

/// The schedule and, for one read from a file, where its ops stand in the file: every
/// message names ops by the file's steps and lines when it has them.
struct Named {
  const Schedule& s;
  const OpOrigins* origins;

  const std::optional<OpOrigin>& origin(RankId rank, std::size_t index) const {
    static const std::optional<OpOrigin> kNone;
    if (!origins || !origins->contains(rank)) return kNone;
    const auto& ops = (*origins)[rank];
    return index < ops.size() ? ops[index] : kNone;
  }
  static std::string file_step(const OpOrigin& o) {
    const std::string place = !o.place.empty()
                                  ? o.place
                                  : "line " + std::to_string(o.line) +
                                        (o.column > 0 ? ":" + std::to_string(o.column) : "");
    return "step " + std::to_string(o.step) + " (" + o.action + ", " + place + ")";
  }
  /// "step 3 (1F0)"; from a file "step 3 (1F0, line 2:7)", and an op the file does not
  /// have (a message Loom's lowering added) by the file's step it serves.
  std::string step(RankId rank, std::size_t index) const {
    const std::string own = to_string(s.op({rank, index}), s);
    if (!origins) return "step " + std::to_string(index) + " (" + own + ")";
    if (const auto& o = origin(rank, index)) return file_step(*o);
    // A send carries the output of the step before it; anything else serves the next one.
    const std::size_t size = s.programs[rank].size();
    auto before = [&]() -> std::string {
      for (std::size_t i = index + 1; i < size; ++i)
        if (const auto& o = origin(rank, i)) return "Loom's " + own + " before " + file_step(*o);
      return "";
    };
    auto after = [&]() -> std::string {
      for (std::size_t i = index; i-- > 0;)
        if (const auto& o = origin(rank, i)) return "Loom's " + own + " after " + file_step(*o);
      return "";
    };
    const bool send = std::holds_alternative<Send>(s.op({rank, index}));
    if (std::string text = send ? after() : before(); !text.empty()) return text;
    if (std::string text = send ? before() : after(); !text.empty()) return text;
    return "Loom's " + own;
  }
};

/// The op rank `rank` stopped at, or "the end of its program".
std::string where_stuck(const Named& n, const PerRank<std::size_t>& next, RankId rank) {
  const std::size_t i = next[rank];
  if (i >= n.s.programs[rank].size()) return "finished its program";
  return "stuck at " + n.step(rank, i);
}

/// Each rank's async collectives (Collective::async) in program order, and how many of them
/// have run: an async collective runs once every member has issued it and each member's
/// earlier async collectives have run (one communication stream per rank, in order).
struct Streams {
  explicit Streams(const Schedule& s) : ops(s.num_ranks()), done(s.num_ranks(), 0) {
    for (const RankId r : s.rank_ids()) {
      for (std::size_t i = 0; i < s.programs[r].size(); ++i) {
        const auto* c = std::get_if<Collective>(&s.programs[r][i]);
        if (c && c->async) ops[r].push_back(i);
      }
    }
  }
  /// How many of rank r's async collectives come before op `index`.
  std::size_t issued_before(RankId r, std::size_t index) const {
    return static_cast<std::size_t>(std::lower_bound(ops[r].begin(), ops[r].end(), index) -
                                    ops[r].begin());
  }
  PerRank<std::vector<std::size_t>> ops;
  PerRank<std::size_t> done;
};

/// How many of the rank's async collectives the op at `index` needs to have run first
/// (async_needed_before; at the program's end, all of them).
std::size_t async_needed(const Schedule& s, const Streams& streams, RankId r, std::size_t index) {
  const std::size_t issued = streams.issued_before(r, index);
  if (index >= s.programs[r].size()) return issued;
  return async_needed_before(s.programs[r][index], issued);
}

std::string explain(const Named& n, const Matching& m, const Streams& streams,
                    const PerRank<std::size_t>& next, RankId r) {
  const Schedule& s = n.s;
  const std::size_t i = next[r];
  if (streams.done[r] < async_needed(s, streams, r, i)) {
    const std::size_t first = streams.ops[r][streams.done[r]];
    std::string text = "\n  rank " + to_string(r) + " " +
                       (i < s.programs[r].size() ? "stuck at " + n.step(r, i)
                                                 : std::string("at the end of its program")) +
                       ": waits for its async " + n.step(r, first) + ", which never runs:";
    for (const OpRef& member : m.members(m.instance_of({r, first}))) {
      if (next[member.rank] <= member.index)
        text += " rank " + to_string(member.rank) + " never issues " +
                n.step(member.rank, member.index) + " (" + where_stuck(n, next, member.rank) + ");";
      else if (streams.issued_before(member.rank, member.index) > streams.done[member.rank])
        text += " rank " + to_string(member.rank) + " runs its earlier async collectives first;";
    }
    text.pop_back();
    return text;
  }
  const Op& op = s.op({r, i});
  std::string text = "\n  rank " + to_string(r) + " stuck at " + n.step(r, i) + ": ";
  if (std::holds_alternative<Recv>(op)) {
    const OpRef send = m.peer_of({r, i});
    return text + "waits for its producer, rank " + to_string(send.rank) + " " +
           n.step(send.rank, send.index) + ", which rank " + to_string(send.rank) +
           " never reaches (" + where_stuck(n, next, send.rank) + ")";
  }
  const InstanceId instance = m.instance_of({r, i});
  text += "waits for the other members of its collective:";
  for (const OpRef& member : m.members(instance)) {
    if (next[member.rank] < member.index) {
      text += " rank " + to_string(member.rank) + " never reaches " +
              n.step(member.rank, member.index) + " (" + where_stuck(n, next, member.rank) + ");";
    }
  }
  text.pop_back();
  return text;
}

/// Whether rank r's next op can run now.
bool can_run(const Schedule& s, const Matching& m, const Streams& streams,
             const PerRank<std::size_t>& next, RankId r) {
  const OpRef here{r, next[r]};
  if (streams.done[r] < async_needed(s, streams, r, here.index)) return false;
  const Op& op = s.op(here);
  if (std::holds_alternative<Recv>(op)) {
    const OpRef send = m.peer_of(here);
    return next[send.rank] > send.index;
  }
  if (const auto* c = std::get_if<Collective>(&op); c && !c->async) {
    const InstanceId instance = m.instance_of(here);
    for (const OpRef& member : m.members(instance)) {
      if (next[member.rank] < member.index) return false;
    }
  }
  return true;  // compute, eager sends, async collectives (issued: the rank goes on)
}

/// Runs every async collective that can: true when one ran.
bool run_streams(const Matching& m, Streams& streams, const PerRank<std::size_t>& next) {
  bool moved = false;
  for (bool again = true; again;) {
    again = false;
    for (const RankId r : streams.ops.ids()) {
      if (streams.done[r] >= streams.ops[r].size()) continue;
      const std::size_t index = streams.ops[r][streams.done[r]];
      const auto& members = m.members(m.instance_of({r, index}));
      bool ready = true;
      for (const OpRef& member : members) {
        ready = ready && next[member.rank] > member.index &&
                streams.ops[member.rank][streams.done[member.rank]] == member.index;
      }
      if (!ready) continue;
      for (const OpRef& member : members) ++streams.done[member.rank];
      again = moved = true;
    }
  }
  return moved;
}

}  // namespace

void check_runs_to_completion(const Schedule& schedule, const OpOrigins* origins) {
  const Matching matching = match_operations(schedule);
  PerRank<std::size_t> next(schedule.num_ranks(), 0);
  Streams streams(schedule);
  // A collective's members pass it one by one: a member that passed it counts as having
  // reached it (next > index), so the rest still see every member arrived.
  for (bool moved = true; moved;) {
    moved = run_streams(matching, streams, next);
    for (const RankId r : schedule.rank_ids()) {
      const std::size_t size = schedule.programs[r].size();
      while (next[r] < size && can_run(schedule, matching, streams, next, r)) {
        ++next[r];
        moved = true;
      }
    }
  }
  constexpr int kShown = 8;  // enough to see the cycle; the rest are counted
  std::string stuck;
  int count = 0;
  for (const RankId r : schedule.rank_ids()) {
    const bool finished =
        next[r] >= schedule.programs[r].size() && streams.done[r] >= streams.ops[r].size();
    if (finished) continue;
    if (count++ < kShown) stuck += explain({schedule, origins}, matching, streams, next, r);
  }
  if (count > kShown)
    stuck += "\n  ... and " + std::to_string(count - kShown) + " more stuck rank(s) (the first " +
             std::to_string(kShown) + " shown)";
  if (count > 0) {
    throw InfeasibleError("schedule deadlocks: " + std::to_string(count) +
                          " rank(s) can never finish" + stuck);
  }
}

}  // namespace loom
