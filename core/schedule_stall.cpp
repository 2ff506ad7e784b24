// A dependency-only run of the schedule (no time, no links): each rank advances while its
// next op can start. What is left when nothing moves is the deadlock, and the matching
// tells each stuck op's producer, so the message names it.
#include "core/schedule_stall.hpp"

#include <cstddef>

#include "core/errors.hpp"
#include "core/index.hpp"
#include "core/matching.hpp"

namespace loom {
namespace {

std::string step(const Schedule& s, RankId rank, std::size_t index) {
  return "step " + std::to_string(index) + " (" + to_string(s.op({rank, index}), s) + ")";
}

/// The op rank `rank` stopped at, or "the end of its program".
std::string where_stuck(const Schedule& s, const PerRank<std::size_t>& next, RankId rank) {
  const std::size_t i = next[rank];
  if (i >= s.programs[rank].size()) return "finished its program";
  return "stuck at " + step(s, rank, i);
}

std::string explain(const Schedule& s, const Matching& m, const PerRank<std::size_t>& next,
                    RankId r) {
  const std::size_t i = next[r];
  const Op& op = s.op({r, i});
  std::string text = "\n  rank " + to_string(r) + " stuck at " + step(s, r, i) + ": ";
  if (std::holds_alternative<Recv>(op)) {
    const OpRef send = m.peer_of({r, i});
    return text + "waits for its producer, rank " + to_string(send.rank) + " " +
           step(s, send.rank, send.index) + ", which rank " + to_string(send.rank) +
           " never reaches (" + where_stuck(s, next, send.rank) + ")";
  }
  const InstanceId instance = m.instance_of({r, i});
  text += "waits for the other members of its collective:";
  for (const OpRef& member : m.members(instance)) {
    if (next[member.rank] < member.index) {
      text += " rank " + to_string(member.rank) + " never reaches " +
              step(s, member.rank, member.index) + " (" + where_stuck(s, next, member.rank) + ");";
    }
  }
  text.pop_back();
  return text;
}

/// Whether rank r's next op can run now.
bool can_run(const Schedule& s, const Matching& m, const PerRank<std::size_t>& next, RankId r) {
  const OpRef here{r, next[r]};
  const Op& op = s.op(here);
  if (std::holds_alternative<Recv>(op)) {
    const OpRef send = m.peer_of(here);
    return next[send.rank] > send.index;
  }
  if (std::holds_alternative<Collective>(op)) {
    const InstanceId instance = m.instance_of(here);
    for (const OpRef& member : m.members(instance)) {
      if (next[member.rank] < member.index) return false;
    }
  }
  return true;  // compute and eager sends
}

}  // namespace

void check_runs_to_completion(const Schedule& schedule) {
  const Matching matching = match_operations(schedule);
  PerRank<std::size_t> next(schedule.num_ranks(), 0);
  // A collective's members pass it one by one: a member that passed it counts as having
  // reached it (next > index), so the rest still see every member arrived.
  for (bool moved = true; moved;) {
    moved = false;
    for (const RankId r : schedule.rank_ids()) {
      const std::size_t size = schedule.programs[r].size();
      while (next[r] < size && can_run(schedule, matching, next, r)) {
        ++next[r];
        moved = true;
      }
    }
  }
  std::string stuck;
  int count = 0;
  for (const RankId r : schedule.rank_ids()) {
    if (next[r] >= schedule.programs[r].size()) continue;
    if (count++ < 8) stuck += explain(schedule, matching, next, r);
  }
  if (count > 0) {
    throw InfeasibleError("schedule deadlocks: " + std::to_string(count) +
                          " rank(s) can never finish" + stuck);
  }
}

}  // namespace loom
