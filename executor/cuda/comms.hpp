#pragma once
/// The NCCL communicators of one rank of the cuda backend, and checked NCCL calls.
///
/// Matching: the Schedule IR matches point-to-point messages FIFO per channel (ordered
/// rank pair + layer edge, core/matching.hpp) while NCCL matches FIFO per communicator
/// and peer. One communicator per channel therefore gives NCCL exactly the IR's
/// semantics, however a rank interleaves its sends and receives across channels; each
/// channel also gets its own stream, so an eager send never waits behind a receive.
/// Collectives run on one communicator per Schedule::groups entry (ring order = rank
/// order in the group).
///
/// Every communicator is created collectively by all ranks from the same schedule (so
/// every rank derives the same list in the same order) by splitting the world
/// communicator, which is bootstrapped from rank 0's ncclUniqueId (bootstrap.hpp).
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <map>
#include <string>
#include <vector>

#include "core/matching.hpp"
#include "core/schedule.hpp"
#include "executor/cuda/bootstrap.hpp"

namespace loom::exec::cuda {

/// Throws kernels::CudaError naming the call and NCCL's message when status is not
/// ncclSuccess.
void check_nccl(ncclResult_t status, const char* what, const char* file, int line);
#define LOOM_NCCL_CHECK(call) ::loom::exec::cuda::check_nccl((call), #call, __FILE__, __LINE__)

class RankComms {
 public:
  /// Collective over all ranks; throws ExecError when the group does not form within
  /// timeout_s (a rank missing or dead before its first operation).
  RankComms(const Schedule& schedule, const LaunchInfo& info, double timeout_s);
  ~RankComms();  ///< destroys (or, after abort_all, has already aborted) every communicator
  RankComms(const RankComms&) = delete;
  RankComms& operator=(const RankComms&) = delete;

  ncclComm_t world() const { return world_; }
  /// The channel's communicator (this rank is one end): peer rank 0 = src, 1 = dst.
  ncclComm_t channel(const MessageChannel& channel) const { return channels_.at(channel); }
  cudaStream_t channel_stream(const MessageChannel& channel) const { return streams_.at(channel); }
  ncclComm_t group(GroupId group) const { return groups_.at(group); }

  /// The first asynchronous error of any communicator, described ("" when none).
  std::string async_error() const;
  /// Aborts every communicator (pending operations end, so no rank waits forever).
  void abort_all();

 private:
  ncclComm_t world_ = nullptr;
  std::map<MessageChannel, ncclComm_t> channels_;
  std::map<MessageChannel, cudaStream_t> streams_;
  std::map<GroupId, ncclComm_t> groups_;
  bool aborted_ = false;
};

}  // namespace loom::exec::cuda
