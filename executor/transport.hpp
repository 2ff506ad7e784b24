#pragma once
/// The host backend's in-process transport: one FIFO mailbox per message channel
/// (ordered rank pair + layer edge, core/matching.hpp's channel_of, as NCCL does on one
/// communicator per module edge) and one rendezvous per collective instance (the k-th
/// collective of each member of a group). Every wait has a deadline, and any rank's
/// failure aborts every wait at once, so a dead rank or a hung transfer ends the run
/// instead of hanging it.
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/index.hpp"
#include "core/matching.hpp"
#include "executor/host_state.hpp"

namespace loom::exec {

struct Message {
  MessageTag tag;
  Activation payload;
};

class Transport {
 public:
  /// `ranks`: the threads that use it. A wait gives up only when, for `timeout_s`, every
  /// rank still running has been waiting too (nobody computing: a deadlock or a dead
  /// peer); a peer busy with a long compute is alive, however long it takes.
  Transport(double timeout_s, int ranks);

  /// Eager: never blocks.
  void send(RankId src, RankId dst, Message message);
  /// Blocks until the channel's next message arrives; throws ExecError on timeout or abort.
  Message recv(RankId src, RankId dst, const MessageTag& tag);

  /// Sum (all-reduce) or concatenation in member order (all-gather) of every member's
  /// buffer for the `instance`-th collective on `group`; blocks until all members
  /// arrived. Throws ExecError on timeout, abort or mismatched all-reduce sizes.
  std::vector<float> all_reduce(GroupId group, InstanceId instance, int member, int members,
                                std::vector<float> buffer);
  std::vector<float> all_gather(GroupId group, InstanceId instance, int member, int members,
                                std::vector<float> buffer);
  /// All-to-all: member i's buffers[j] becomes member j's result[i]. Blocks until all
  /// members arrived.
  std::vector<std::vector<float>> all_to_all(GroupId group, InstanceId instance, int member,
                                             int members, std::vector<std::vector<float>> buffers);

  /// Records the first failure and wakes every waiter (they throw ExecError naming it).
  void abort(const std::string& why);
  /// A rank has run its whole program: it will neither wait nor send again.
  void finished();

 private:
  /// A member's place in its collective group (the group's ring order).
  using GroupMember = Id<struct GroupMemberTag>;
  struct Room {
    IdVector<GroupMember, std::vector<float>> parts;
    int arrived = 0;
    int left = 0;  ///< members that have not taken the result yet
    bool done = false;
    std::vector<float> result;
  };
  std::vector<float> rendezvous(bool reduce, GroupId group, InstanceId instance, int member,
                                int members, std::vector<float> buffer);
  /// Waits on `pred` until the deadline; throws ExecError describing `what` otherwise.
  template <class Pred>
  void wait(std::unique_lock<std::mutex>& lock, Pred pred, const std::string& what);

  std::mutex mutex_;
  std::condition_variable changed_;
  std::chrono::duration<double> timeout_;
  int running_ = 0;  ///< ranks that have not finished their program
  int waiting_ = 0;  ///< ranks blocked in wait()
  std::map<MessageChannel, std::deque<Message>> mailboxes_;
  std::map<std::pair<GroupId, InstanceId>, Room> rooms_;
  std::string abort_reason_;
};

}  // namespace loom::exec
