#include "executor/transport.hpp"

#include <cstdio>

namespace loom::exec {

Transport::Transport(double timeout_s, int ranks) : timeout_(timeout_s), running_(ranks) {}

template <class Pred>
void Transport::wait(std::unique_lock<std::mutex>& lock, Pred pred, const std::string& what) {
  ++waiting_;
  bool ok = false;
  // A deadline passes without the data: give up only if no rank is computing either.
  // A rank inside a long compute is neither waiting nor finished, so waiting_ < running_.
  while (!(ok = changed_.wait_for(lock, timeout_, [&] {
    return !abort_reason_.empty() || pred();
  })) && waiting_ < running_) {
  }
  --waiting_;
  if (!abort_reason_.empty())
    throw ExecError("aborted while waiting for " + what + ": " + abort_reason_);
  if (!ok) {
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%g", timeout_.count());
    throw ExecError("timed out after " + std::string(seconds) + " s waiting for " + what +
                    ": every running rank has been waiting that long and none is computing "
                    "(a deadlock, or a peer that died)");
  }
}

void Transport::finished() {
  {
    std::lock_guard lock(mutex_);
    --running_;
  }
  changed_.notify_all();
}

void Transport::send(RankId src, RankId dst, Message message) {
  {
    std::lock_guard lock(mutex_);
    mailboxes_[channel_of(src, dst, message.tag)].push_back(std::move(message));
  }
  changed_.notify_all();
}

Message Transport::recv(RankId src, RankId dst, const MessageTag& tag) {
  std::unique_lock lock(mutex_);
  auto& box = mailboxes_[channel_of(src, dst, tag)];
  wait(
      lock, [&] { return !box.empty(); }, "a message from rank " + to_string(src));
  Message m = std::move(box.front());
  box.pop_front();
  if (!(m.tag == tag)) {
    throw ExecError("received microbatch " + to_string(m.tag.microbatch) + " from rank " +
                    to_string(src) + " where the program expects microbatch " +
                    to_string(tag.microbatch) + " (sends and receives out of order)");
  }
  return m;
}

std::vector<float> Transport::rendezvous(bool reduce, GroupId group, InstanceId instance,
                                         int member, int members, std::vector<float> buffer) {
  std::unique_lock lock(mutex_);
  Room& room = rooms_[{group, instance}];
  if (room.parts.empty()) {
    room.parts.resize(members);
    room.left = members;
  }
  room.parts[GroupMember{member}] = std::move(buffer);
  if (++room.arrived == members) {
    // The last member to arrive combines; ring order does not matter for the host's sum
    // beyond float rounding, and member order fixes it (deterministic).
    for (const auto& part : room.parts) {
      if (!reduce) {
        room.result.insert(room.result.end(), part.begin(), part.end());
      } else if (room.result.empty()) {
        room.result = part;
      } else if (part.size() != room.result.size()) {
        room.done = true;
        abort_reason_ =
            "all-reduce on group " + to_string(group) + ": members hold different gradient sizes";
      } else {
        for (size_t i = 0; i < part.size(); ++i) room.result[i] += part[i];
      }
    }
    room.done = true;
    changed_.notify_all();
  } else {
    wait(
        lock, [&] { return room.done; },
        "the other members of collective group " + to_string(group) + " (" +
            std::to_string(room.arrived) + " of " + std::to_string(members) + " arrived)");
  }
  if (!abort_reason_.empty()) throw ExecError(abort_reason_);
  std::vector<float> result = room.result;
  if (--room.left == 0) rooms_.erase({group, instance});
  return result;
}

std::vector<float> Transport::all_reduce(GroupId group, InstanceId instance, int member,
                                         int members, std::vector<float> buffer) {
  return rendezvous(true, group, instance, member, members, std::move(buffer));
}

std::vector<float> Transport::all_gather(GroupId group, InstanceId instance, int member,
                                         int members, std::vector<float> buffer) {
  return rendezvous(false, group, instance, member, members, std::move(buffer));
}

std::vector<std::vector<float>> Transport::all_to_all(GroupId group, InstanceId instance,
                                                      int member, int members,
                                                      std::vector<std::vector<float>> buffers) {
  // One rendezvous of every member's buffers, each prefixed by its length; a member keeps
  // the one addressed to it from each.
  std::vector<float> flat;
  for (const std::vector<float>& b : buffers) {
    flat.push_back(static_cast<float>(b.size()));
    flat.insert(flat.end(), b.begin(), b.end());
  }
  const std::vector<float> all = all_gather(group, instance, member, members, std::move(flat));
  std::vector<std::vector<float>> mine;
  size_t at = 0;
  for (int from = 0; from < members; ++from) {
    for (int to = 0; to < members; ++to) {
      const auto n = static_cast<size_t>(all.at(at++));
      if (to == member)
        mine.emplace_back(all.begin() + static_cast<std::ptrdiff_t>(at),
                          all.begin() + static_cast<std::ptrdiff_t>(at + n));
      at += n;
    }
  }
  return mine;
}

void Transport::abort(const std::string& why) {
  {
    std::lock_guard lock(mutex_);
    if (abort_reason_.empty()) abort_reason_ = why;
  }
  changed_.notify_all();
}

}  // namespace loom::exec
