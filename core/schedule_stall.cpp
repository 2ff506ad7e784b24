// A dependency-only run of the schedule (no time, no links): each rank advances while its
// next op can start. What is left when nothing moves is the deadlock, and the matching
// tells each stuck op's producer, so the message names it.
#include "core/schedule_stall.hpp"

#include "core/errors.hpp"
#include "core/matching.hpp"

namespace loom {
namespace {

std::string step(const Schedule& s, int rank, int index) {
  return "step " + std::to_string(index) + " (" +
         to_string(s.programs[static_cast<size_t>(rank)][static_cast<size_t>(index)], s) + ")";
}

/// The op rank `rank` stopped at, or "the end of its program".
std::string where_stuck(const Schedule& s, const std::vector<int>& next, int rank) {
  const int i = next[static_cast<size_t>(rank)];
  if (i >= static_cast<int>(s.programs[static_cast<size_t>(rank)].size()))
    return "finished its program";
  return "stuck at " + step(s, rank, i);
}

std::string explain(const Schedule& s, const Matching& m, const std::vector<int>& next, int r) {
  const int i = next[static_cast<size_t>(r)];
  const Op& op = s.programs[static_cast<size_t>(r)][static_cast<size_t>(i)];
  std::string text = "\n  rank " + std::to_string(r) + " stuck at " + step(s, r, i) + ": ";
  if (std::holds_alternative<Recv>(op)) {
    const OpRef send = m.peer[static_cast<size_t>(r)][static_cast<size_t>(i)];
    return text + "waits for its producer, rank " + std::to_string(send.rank) + " " +
           step(s, send.rank, send.index) + ", which rank " + std::to_string(send.rank) +
           " never reaches (" + where_stuck(s, next, send.rank) + ")";
  }
  const int instance = m.collective_instance[static_cast<size_t>(r)][static_cast<size_t>(i)];
  text += "waits for the other members of its collective:";
  for (const OpRef& member : m.instances[static_cast<size_t>(instance)]) {
    if (next[static_cast<size_t>(member.rank)] < member.index) {
      text += " rank " + std::to_string(member.rank) + " never reaches " +
              step(s, member.rank, member.index) + " (" + where_stuck(s, next, member.rank) + ");";
    }
  }
  text.pop_back();
  return text;
}

/// Whether rank r's next op can run now.
bool can_run(const Schedule& s, const Matching& m, const std::vector<int>& next, int r) {
  const size_t i = static_cast<size_t>(next[static_cast<size_t>(r)]);
  const Op& op = s.programs[static_cast<size_t>(r)][i];
  if (std::holds_alternative<Recv>(op)) {
    const OpRef send = m.peer[static_cast<size_t>(r)][i];
    return next[static_cast<size_t>(send.rank)] > send.index;
  }
  if (std::holds_alternative<Collective>(op)) {
    const int instance = m.collective_instance[static_cast<size_t>(r)][i];
    for (const OpRef& member : m.instances[static_cast<size_t>(instance)]) {
      if (next[static_cast<size_t>(member.rank)] < member.index) return false;
    }
  }
  return true;  // compute and eager sends
}

}  // namespace

void check_runs_to_completion(const Schedule& schedule) {
  const Matching matching = match_operations(schedule);
  const int ranks = schedule.num_ranks();
  std::vector<int> next(static_cast<size_t>(ranks), 0);
  // A collective's members pass it one by one: a member that passed it counts as having
  // reached it (next > index), so the rest still see every member arrived.
  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < ranks; ++r) {
      const int size = static_cast<int>(schedule.programs[static_cast<size_t>(r)].size());
      while (next[static_cast<size_t>(r)] < size && can_run(schedule, matching, next, r)) {
        ++next[static_cast<size_t>(r)];
        moved = true;
      }
    }
  }
  std::string stuck;
  int count = 0;
  for (int r = 0; r < ranks; ++r) {
    if (next[static_cast<size_t>(r)] >=
        static_cast<int>(schedule.programs[static_cast<size_t>(r)].size()))
      continue;
    if (count++ < 8) stuck += explain(schedule, matching, next, r);
  }
  if (count > 0) {
    throw InfeasibleError("schedule deadlocks: " + std::to_string(count) +
                          " rank(s) can never finish" + stuck);
  }
}

}  // namespace loom
