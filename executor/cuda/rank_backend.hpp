#pragma once
/// One rank of the cuda backend: the RankBackend the interpreter loop drives
/// (executor/backend.hpp), enqueueing each op on the GPU without waiting for it.
///
///   Compute      kernels on the compute stream (F, I, W as separate launches; B = I + W)
///   Send         on the channel's own stream after the producing work (an event), so an
///                eager send never blocks the rank; its buffer is freed in stream order
///                on the channel, so it lives exactly until the transfer is done
///   Recv         ncclRecv on the channel's stream; the compute stream waits for it
///   Collective   on the compute stream over the group's communicator (all-reduce of
///                the accumulated gradients, in place; all-gather moves bytes only); an
///                async one (a gradient bucket) on the rank's gradient stream after the
///                work issued so far, and the optimizer step waits for the last of them
/// Each op gets a start and an end CUDA event; finish() waits for them in program order,
/// polling ncclCommGetAsyncError, and aborts every communicator when an error appears or
/// no op completes for ExecOptions::timeout_s, naming the rank and the stuck op.
#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <vector>

#include "core/matching.hpp"
#include "executor/backend.hpp"
#include "executor/cuda/comms.hpp"
#include "executor/cuda/model_state.hpp"
#include "kernels/cuda/gemm.hpp"

namespace loom::exec::cuda {

class CudaRankBackend final : public RankBackend {
 public:
  CudaRankBackend(const ExecProblem& problem, const LayerGraph& graph, RankComms& comms,
                  RankId rank, cudaStream_t compute, double timeout_s);
  ~CudaRankBackend() override;

  /// A world barrier, then the epoch event every timing is measured from.
  void start_epoch();
  void compute(std::size_t index, const Compute& op) override;
  void send(std::size_t index, const Send& op) override;
  void recv(std::size_t index, const Recv& op) override;
  void collective(std::size_t index, const Collective& op) override;
  void optimizer_step(std::size_t index, const OptimizerStep& op) override;
  /// Waits until every op of the program completed (see the header comment).
  void finish();
  std::vector<OpTiming> timings() override;  ///< call after finish()
  Gradients gradients() override;            ///< call after finish()
  Parameters updated_parameters() override;  ///< call after finish()
  /// This rank's trainable parameters in gradient_tensors' order.
  std::vector<DeviceMatrix*> parameter_tensors(const std::vector<int>& layers) {
    return state_.parameter_tensors(layers);
  }
  /// This rank's gradients flattened in the order gradient_layout() describes.
  std::vector<DeviceMatrix*> gradient_tensors(const std::vector<int>& layers) {
    return state_.gradient_tensors(layers);
  }

 private:
  cudaEvent_t event();
  void record_start(std::size_t index, cudaStream_t stream);
  void record_end(std::size_t index, cudaStream_t stream);
  /// Blocks until `e` completed, with the same error and timeout rules as finish().
  void wait_event(cudaEvent_t e, const std::string& what);
  [[noreturn]] void fail(std::size_t index, const std::string& why);

  const ExecProblem& problem_;
  const Schedule& schedule_;
  const Model& model_;
  RankComms& comms_;
  RankId rank_;
  cudaStream_t compute_;
  double timeout_s_;
  kernels::Blas blas_;
  CudaModelState state_;
  std::map<std::size_t, std::vector<int>> reduce_layers_;
  cudaEvent_t epoch_ = nullptr;
  cudaStream_t gradient_stream_ = nullptr;  ///< async collectives, created on first use
  cudaEvent_t async_end_ = nullptr;         ///< the last async collective's end
  bool stepped_ = false;
  std::vector<cudaEvent_t> start_, end_;
  std::vector<cudaEvent_t> owned_;
};

}  // namespace loom::exec::cuda
