#include "executor/cuda/comms.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <set>
#include <thread>

#include "executor/backend.hpp"
#include "kernels/cuda/check.hpp"

namespace loom::exec::cuda {
namespace {

/// Every channel of the schedule, in one order all ranks agree on.
std::set<MessageChannel> all_channels(const Schedule& schedule) {
  std::set<MessageChannel> channels;
  for (const RankId r : schedule.rank_ids())
    for (const Op& op : schedule.programs[r])
      if (const Send* s = std::get_if<Send>(&op)) channels.insert(channel_of(r, s->peer, s->tag));
  return channels;
}

/// Runs `work` on a detached thread and waits at most timeout_s: a blocking NCCL
/// initialisation whose peer died would otherwise hang this rank forever. On timeout the
/// thread is abandoned (the process is about to exit with the error).
void with_deadline(const std::function<void()>& work, double timeout_s, const std::string& what,
                   int rank) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> result = done->get_future();
  std::thread([work, done] {
    try {
      work();
      done->set_value();
    } catch (...) {
      done->set_exception(std::current_exception());
    }
  }).detach();
  if (result.wait_for(std::chrono::duration<double>(timeout_s)) != std::future_status::ready)
    throw ExecError("rank " + std::to_string(rank) + " " + what + ": timed out after " +
                    std::to_string(timeout_s) + " s (a rank is missing or died)");
  result.get();
}

}  // namespace

void check_nccl(ncclResult_t status, const char* what, const char* file, int line) {
  if (status != ncclSuccess && status != ncclInProgress)
    kernels::throw_cuda_error(
        what, std::string(ncclGetErrorString(status)) + " (" + ncclGetLastError(nullptr) + ")",
        file, line);
}

RankComms::RankComms(const Schedule& schedule, const LaunchInfo& info, double timeout_s) {
  ncclUniqueId id{};
  if (info.rank == 0) LOOM_NCCL_CHECK(ncclGetUniqueId(&id));
  std::vector<char> blob(sizeof id);
  std::memcpy(blob.data(), &id, sizeof id);
  blob = broadcast_from_rank0(info, blob, timeout_s);
  if (blob.size() != sizeof id)
    throw ExecError("rank " + std::to_string(info.rank) + " bootstrap: got " +
                    std::to_string(blob.size()) + " bytes, expected an ncclUniqueId");
  std::memcpy(&id, blob.data(), sizeof id);
  int device = 0;
  LOOM_CUDA_CHECK(cudaGetDevice(&device));
  const RankId me{info.rank};  // one process per rank of the schedule
  with_deadline(
      [&] {
        // The current device is per thread: NCCL binds each communicator to this one.
        LOOM_CUDA_CHECK(cudaSetDevice(device));
        LOOM_NCCL_CHECK(ncclCommInitRank(&world_, info.world_size, id, info.rank));
        for (const MessageChannel& c : all_channels(schedule)) {
          const bool member = me == c.src || me == c.dst;
          ncclComm_t comm = nullptr;
          LOOM_NCCL_CHECK(ncclCommSplit(world_, member ? 0 : NCCL_SPLIT_NOCOLOR,
                                        me == c.src ? 0 : 1, &comm, nullptr));
          if (!member) continue;
          channels_[c] = comm;
          cudaStream_t stream = nullptr;
          LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
          streams_[c] = stream;
        }
        for (const GroupId g : schedule.groups.ids()) {
          const std::vector<RankId>& members = schedule.groups[g];
          const auto it = std::find(members.begin(), members.end(), me);
          ncclComm_t comm = nullptr;
          LOOM_NCCL_CHECK(ncclCommSplit(world_, it == members.end() ? NCCL_SPLIT_NOCOLOR : 0,
                                        static_cast<int>(it - members.begin()), &comm, nullptr));
          if (it != members.end()) groups_[g] = comm;
        }
      },
      timeout_s, "NCCL communicator setup", info.rank);
}

RankComms::~RankComms() {
  // Destructor: errors have nowhere to go; an aborted communicator is already gone.
  std::vector<ncclComm_t> comms{world_};
  for (const auto& [c, comm] : channels_) comms.push_back(comm);
  for (const auto& [g, comm] : groups_) comms.push_back(comm);
  if (!aborted_)
    for (ncclComm_t comm : comms)
      if (comm != nullptr) ncclCommDestroy(comm);
  for (const auto& [c, stream] : streams_) cudaStreamDestroy(stream);
}

std::string RankComms::async_error() const {
  const auto check = [](ncclComm_t comm) {
    ncclResult_t status = ncclSuccess;
    if (comm == nullptr || ncclCommGetAsyncError(comm, &status) != ncclSuccess) return ncclSuccess;
    return status == ncclInProgress ? ncclSuccess : status;
  };
  if (const ncclResult_t s = check(world_); s != ncclSuccess)
    return std::string("world communicator: ") + ncclGetErrorString(s);
  for (const auto& [c, comm] : channels_)
    if (const ncclResult_t s = check(comm); s != ncclSuccess)
      return "channel " + to_string(c.src) + "->" + to_string(c.dst) + ": " + ncclGetErrorString(s);
  for (const auto& [g, comm] : groups_)
    if (const ncclResult_t s = check(comm); s != ncclSuccess)
      return "group " + to_string(g) + ": " + ncclGetErrorString(s);
  return "";
}

void RankComms::abort_all() {
  if (aborted_) return;
  aborted_ = true;
  for (const auto& [c, comm] : channels_) ncclCommAbort(comm);
  for (const auto& [g, comm] : groups_) ncclCommAbort(comm);
  if (world_ != nullptr) ncclCommAbort(world_);
}

}  // namespace loom::exec::cuda
