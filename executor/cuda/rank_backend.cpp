#include "executor/cuda/rank_backend.hpp"

#include <chrono>
#include <cmath>
#include <thread>

#include "core/index.hpp"
#include "core/workload.hpp"
#include "executor/layer_math.hpp"
#include "kernels/cuda/check.hpp"

namespace loom::exec::cuda {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

CudaRankBackend::CudaRankBackend(const ExecProblem& problem, const LayerGraph& graph,
                                 RankComms& comms, RankId rank, cudaStream_t compute,
                                 double timeout_s)
    : problem_(problem),
      schedule_(*problem.schedule),
      model_(*problem.model),
      comms_(comms),
      rank_(rank),
      compute_(compute),
      timeout_s_(timeout_s),
      blas_(compute, /*allow_tf32=*/false),  // exact fp32: the gradient check's tolerance
      state_(problem, graph, schedule_.ranks.at(rank).replica, rank_layers(schedule_, rank),
             schedule_.programs.at(rank), blas_, compute),
      reduce_layers_(allreduce_layers(schedule_, model_, rank)) {
  const size_t ops = schedule_.programs.at(rank).size();
  start_.assign(ops, nullptr);
  end_.assign(ops, nullptr);
  epoch_ = event();
}

CudaRankBackend::~CudaRankBackend() {
  for (cudaEvent_t e : owned_) cudaEventDestroy(e);  // destructor: nothing to report to
  if (gradient_stream_) cudaStreamDestroy(gradient_stream_);
}

cudaEvent_t CudaRankBackend::event() {
  cudaEvent_t e = nullptr;
  LOOM_CUDA_CHECK(cudaEventCreate(&e));
  owned_.push_back(e);
  return e;
}

void CudaRankBackend::record_start(std::size_t index, cudaStream_t stream) {
  start_[index] = event();
  LOOM_CUDA_CHECK(cudaEventRecord(start_[index], stream));
}

void CudaRankBackend::record_end(std::size_t index, cudaStream_t stream) {
  end_[index] = event();
  LOOM_CUDA_CHECK(cudaEventRecord(end_[index], stream));
}

void CudaRankBackend::start_epoch() {
  // A world all-reduce as a barrier: every rank's epoch is recorded when all arrived.
  DeviceMatrix token = DeviceMatrix::zeros(1, 1, compute_);
  LOOM_NCCL_CHECK(
      ncclAllReduce(token.data(), token.data(), 1, ncclFloat, ncclSum, comms_.world(), compute_));
  LOOM_CUDA_CHECK(cudaEventRecord(epoch_, compute_));
  wait_event(epoch_, "the start-of-iteration barrier");
}

void CudaRankBackend::compute(std::size_t index, const Compute& op) {
  record_start(index, compute_);
  run_passes(state_, op);
  record_end(index, compute_);
}

void CudaRankBackend::send(std::size_t index, const Send& op) {
  const MessageChannel channel = channel_of(rank_, op.peer, op.tag);
  const cudaStream_t stream = comms_.channel_stream(channel);
  DeviceActivation a = state_.take_edge(edge_of(op.tag));
  const std::vector<int> expected = layer_output_lengths(
      model_, *problem_.samples,
      schedule_.samples_of(schedule_.ranks[rank_].replica, op.tag.microbatch), op.tag.producer());
  int rows = 0;
  for (int n : expected) rows += n;
  if (rows != a.x.rows())
    throw std::logic_error("message of " + std::to_string(a.x.rows()) +
                           " rows, but the receiver expects " + std::to_string(rows));
  record_start(index, compute_);  // the send may start once the rank reached it
  LOOM_CUDA_CHECK(cudaStreamWaitEvent(stream, start_[index], 0));
  // Peer rank in a channel communicator: 0 = src, 1 = dst.
  if (!a.x.empty())  // both ends size the message from the schedule: skipped alike
    LOOM_NCCL_CHECK(
        ncclSend(a.x.data(), a.x.size(), ncclFloat, 1, comms_.channel(channel), stream));
  record_end(index, stream);
  // Freed now, in stream order after the send on its channel: the memory returns to the
  // pool only once the transfer is done, and nothing waits for it here.
  a.x.use_on(stream);
}

void CudaRankBackend::recv(std::size_t index, const Recv& op) {
  const MessageChannel channel = channel_of(op.peer, rank_, op.tag);
  const cudaStream_t stream = comms_.channel_stream(channel);
  const std::vector<int> lengths = layer_output_lengths(
      model_, *problem_.samples,
      schedule_.samples_of(schedule_.ranks[rank_].replica, op.tag.microbatch), op.tag.producer());
  int rows = 0;
  for (int n : lengths) rows += n;
  const int cols = output_width(model_.layer(op.tag.producer()));
  DeviceActivation a{DeviceMatrix(rows, cols, stream), lengths};
  record_start(index, compute_);
  if (!a.x.empty())
    LOOM_NCCL_CHECK(
        ncclRecv(a.x.data(), a.x.size(), ncclFloat, 0, comms_.channel(channel), stream));
  cudaEvent_t arrived = event();
  LOOM_CUDA_CHECK(cudaEventRecord(arrived, stream));
  // "Recv blocks the rank until the transfer arrived": the compute stream waits for it.
  LOOM_CUDA_CHECK(cudaStreamWaitEvent(compute_, arrived, 0));
  record_end(index, compute_);
  a.x.use_on(compute_);  // from here on it is used (and freed) on the compute stream
  state_.put_edge(edge_of(op.tag), std::move(a));
}

void CudaRankBackend::collective(std::size_t index, const Collective& op) {
  cudaStream_t stream = compute_;
  if (op.async) {  // after the work issued so far, without holding the compute stream
    if (!gradient_stream_)
      LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&gradient_stream_, cudaStreamNonBlocking));
    stream = gradient_stream_;
    cudaEvent_t issued = event();
    LOOM_CUDA_CHECK(cudaEventRecord(issued, compute_));
    LOOM_CUDA_CHECK(cudaStreamWaitEvent(stream, issued, 0));
  }
  record_start(index, stream);
  const ncclComm_t comm = comms_.group(op.group);
  if (op.kind == CollectiveKind::kAllReduce) {
    // Sum every member's accumulated gradients in place (one NCCL group = one launch).
    LOOM_NCCL_CHECK(ncclGroupStart());
    for (DeviceMatrix* g : state_.gradient_tensors(reduce_layers_.at(index)))
      LOOM_NCCL_CHECK(
          ncclAllReduce(g->data(), g->data(), g->size(), ncclFloat, ncclSum, comm, stream));
    LOOM_NCCL_CHECK(ncclGroupEnd());
  } else {
    // As on the host: the IR's all-gathers carry data this math computes whole on one
    // rank; move the bytes (capped at 16 MiB per member), use none of them.
    const int members = isize(schedule_.group_members(op.group));
    const double floats = std::min<double>(1 << 22, op.bytes / 4 / std::max(members, 1));
    DeviceMatrix part = DeviceMatrix::zeros(1, static_cast<int>(floats), stream);
    DeviceMatrix all(members, static_cast<int>(floats), stream);
    if (!part.empty())
      LOOM_NCCL_CHECK(ncclAllGather(part.data(), all.data(), part.size(), ncclFloat, comm, stream));
  }
  record_end(index, stream);
  if (op.async) async_end_ = end_[index];
}

void CudaRankBackend::fail(std::size_t index, const std::string& why) {
  comms_.abort_all();  // every peer's pending NCCL work ends too
  const Op& op = schedule_.programs.at(rank_).at(index);
  throw ExecError("rank " + to_string(rank_) + " op " + std::to_string(index) + " (" +
                  to_string(op, schedule_) + "): " + why);
}

void CudaRankBackend::wait_event(cudaEvent_t e, const std::string& what) {
  const Clock::time_point deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                        std::chrono::duration<double>(timeout_s_));
  while (true) {
    const cudaError_t status = cudaEventQuery(e);
    if (status == cudaSuccess) return;
    if (status != cudaErrorNotReady) LOOM_CUDA_CHECK(status);
    const std::string nccl = comms_.async_error();
    if (!nccl.empty() || Clock::now() > deadline) {
      comms_.abort_all();
      throw ExecError("rank " + to_string(rank_) + ": " + what + ": " +
                      (nccl.empty() ? "timed out after " + std::to_string(timeout_s_) + " s"
                                    : "NCCL error on " + nccl));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

void CudaRankBackend::finish() {
  // Ops complete in program order on the compute stream; sends may finish later on their
  // channels. The deadline restarts whenever an op completes: it bounds a stall, not a run.
  Clock::time_point last_progress = Clock::now();
  for (size_t i = 0; i < end_.size(); ++i) {
    while (true) {
      const cudaError_t status = cudaEventQuery(end_[i]);
      if (status == cudaSuccess) break;
      if (status != cudaErrorNotReady)
        fail(static_cast<int>(i), std::string("CUDA error: ") + cudaGetErrorString(status));
      if (const std::string nccl = comms_.async_error(); !nccl.empty())
        fail(static_cast<int>(i), "NCCL error on " + nccl);
      if (std::chrono::duration<double>(Clock::now() - last_progress).count() > timeout_s_)
        fail(static_cast<int>(i), "no progress for " + std::to_string(timeout_s_) +
                                      " s (a peer died, or a transfer hangs)");
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    last_progress = Clock::now();
  }
}

std::vector<OpTiming> CudaRankBackend::timings() {
  std::vector<OpTiming> out(end_.size());
  for (size_t i = 0; i < end_.size(); ++i) {
    float start_ms = 0, end_ms = 0;
    LOOM_CUDA_CHECK(cudaEventElapsedTime(&start_ms, epoch_, start_[i]));
    LOOM_CUDA_CHECK(cudaEventElapsedTime(&end_ms, epoch_, end_[i]));
    // A send's start is recorded on the compute stream and its end on its channel: an
    // end before the start means it completed at once.
    out[i] = {start_ms * 1e-3, std::max(start_ms, end_ms) * 1e-3};
  }
  return out;
}

Gradients CudaRankBackend::gradients() {
  return state_.gradients();
}

void CudaRankBackend::optimizer_step(std::size_t index, const OptimizerStep& /*op*/) {
  // The IR: the step waits for the rank's async collectives (one stream: the last one).
  if (async_end_) LOOM_CUDA_CHECK(cudaStreamWaitEvent(compute_, async_end_, 0));
  record_start(index, compute_);
  state_.optimizer_step();
  stepped_ = true;
  record_end(index, compute_);
}

Parameters CudaRankBackend::updated_parameters() {
  return stepped_ ? state_.trained_parameters() : Parameters{};
}

}  // namespace loom::exec::cuda
