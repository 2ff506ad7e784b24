// The `cuda` executor backend: one process per GPU. Each process runs one rank of the
// schedule (RANK / WORLD_SIZE from the launcher, bootstrap.hpp), on GPU LOCAL_RANK mod
// the visible device count. After the iteration every process gathers all ranks'
// timings (so each can write the timeline) and rank 0 gathers every rank's gradients
// (for the gradient-equivalence check); other ranks report only their own.
#include <algorithm>
#include <exception>

#include "core/errors.hpp"
#include "executor/backend.hpp"
#include "executor/cuda/comms.hpp"
#include "executor/cuda/profile_cuda.hpp"
#include "executor/cuda/rank_backend.hpp"
#include "executor/host_state.hpp"
#include "executor/layer_math.hpp"
#include "kernels/cuda/check.hpp"
#include "kernels/cuda/device.hpp"

namespace loom::exec {
namespace {

using cuda::CudaRankBackend;
using cuda::DeviceMatrix;
using cuda::LaunchInfo;
using cuda::RankComms;

/// Owns the rank's compute stream.
struct Stream {
  cudaStream_t stream = nullptr;
  Stream() { LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(stream); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
};

/// The trainable layers rank r holds and their parameter shapes, in the order
/// CudaModelState::gradient_tensors flattens them (layer, then parameter name).
std::vector<std::pair<ParamKey, size_t>> gradient_layout(const Schedule& schedule,
                                                         const Model& model, int rank) {
  std::vector<int> layers = rank_layers(schedule, rank);
  std::sort(layers.begin(), layers.end());
  std::vector<std::pair<ParamKey, size_t>> layout;
  for (int l : layers) {
    if (model.layer(l).frozen) continue;
    for (const auto& [name, m] : zero_parameters(model.layer(l)))
      layout.push_back({{l, name}, m.size()});
  }
  return layout;
}

void check_launch(const Schedule& schedule, const LaunchInfo& info) {
  if (info.world_size == schedule.num_ranks()) return;
  throw InputError("--backend cuda runs one process per GPU rank: this schedule has " +
                   std::to_string(schedule.num_ranks()) + " ranks but the launch has " +
                   std::to_string(info.world_size) +
                   " process(es). Launch one per rank, e.g. `torchrun --nproc-per-node " +
                   std::to_string(schedule.num_ranks()) +
                   " loom exec ...`, `mpirun -np N loom exec ...` " +
                   "or `srun -n N loom exec ...` (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)");
}

class CudaExecutor final : public Executor {
 public:
  std::string name() const override { return "cuda"; }

  std::vector<ProfileRow> profile(const Model& model, const Sample& first_sample,
                                  const ProfileRequest& request) override {
    check_model_executable(model);
    LOOM_CUDA_CHECK(
        cudaSetDevice(cuda::launch_info_from_env().local_rank % kernels::cuda_device_count()));
    return cuda::profile_cuda(model, first_sample, request);
  }

  ExecResult run(const ExecProblem& problem, const ExecOptions& options) override {
    const Schedule& schedule = *problem.schedule;
    check_model_executable(*problem.model);
    (void)match_operations(schedule);  // InfeasibleError when messages do not pair up
    const LaunchInfo info = cuda::launch_info_from_env();
    check_launch(schedule, info);
    LOOM_CUDA_CHECK(cudaSetDevice(info.local_rank % kernels::cuda_device_count()));
    const LayerGraph graph(*problem.model);
    Stream compute;
    RankComms comms(schedule, info, options.timeout_s);
    CudaRankBackend backend(problem, graph, comms, info.rank, compute.stream, options.timeout_s);
    try {
      backend.start_epoch();
      run_program(schedule, info.rank, backend, options);
      backend.finish();
    } catch (...) {
      comms.abort_all();  // peers blocked on this rank end with their own errors
      throw;
    }
    ExecResult result;
    result.timeline.timings = gather_timings(schedule, backend.timings(), comms, compute.stream);
    result.gradients = gather_gradients(problem, info.rank, backend, comms, compute.stream);
    return result;
  }

 private:
  /// All-gather of every rank's (start, end) pairs, padded to the longest program.
  static std::vector<std::vector<OpTiming>> gather_timings(const Schedule& schedule,
                                                           const std::vector<OpTiming>& mine,
                                                           RankComms& comms, cudaStream_t stream) {
    size_t longest = 0;
    for (const auto& program : schedule.programs) longest = std::max(longest, program.size());
    const int n = schedule.num_ranks();
    std::vector<double> host(2 * longest, 0.0);
    for (size_t i = 0; i < mine.size(); ++i) {
      host[2 * i] = mine[i].start_s;
      host[2 * i + 1] = mine[i].end_s;
    }
    const auto part = kernels::DeviceBuffer<double>::from_host(host);
    kernels::DeviceBuffer<double> all(host.size() * static_cast<size_t>(n));
    LOOM_NCCL_CHECK(
        ncclAllGather(part.data(), all.data(), part.size(), ncclDouble, comms.world(), stream));
    LOOM_CUDA_CHECK(cudaStreamSynchronize(stream));
    const std::vector<double> gathered = all.to_host();
    std::vector<std::vector<OpTiming>> out(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < schedule.programs[static_cast<size_t>(r)].size(); ++i) {
        const size_t at = static_cast<size_t>(r) * 2 * longest + 2 * i;
        out[static_cast<size_t>(r)].push_back({gathered[at], gathered[at + 1]});
      }
    return out;
  }

  /// Rank 0 receives every rank's flattened gradients; other ranks keep their own.
  static std::vector<Gradients> gather_gradients(const ExecProblem& problem, int rank,
                                                 CudaRankBackend& backend, RankComms& comms,
                                                 cudaStream_t stream) {
    const Schedule& schedule = *problem.schedule;
    const int n = schedule.num_ranks();
    std::vector<Gradients> out(static_cast<size_t>(n));
    out[static_cast<size_t>(rank)] = backend.gradients();
    std::vector<DeviceMatrix> inbox;
    LOOM_NCCL_CHECK(ncclGroupStart());
    if (rank == 0) {
      for (int r = 1; r < n; ++r) {
        size_t floats = 0;
        for (const auto& [key, size] : gradient_layout(schedule, *problem.model, r)) floats += size;
        inbox.emplace_back(1, static_cast<int>(floats), stream);
        LOOM_NCCL_CHECK(ncclRecv(inbox.back().data(), floats, ncclFloat, r, comms.world(), stream));
      }
    } else {
      // One message: NCCL pairs a send with a receive of the same count.
      std::vector<int> layers = rank_layers(schedule, rank);
      std::sort(layers.begin(), layers.end());
      std::vector<int> trainable;
      for (int l : layers)
        if (!problem.model->layer(l).frozen) trainable.push_back(l);
      const std::vector<DeviceMatrix*> tensors = backend.gradient_tensors(trainable);
      size_t floats = 0;
      for (const DeviceMatrix* g : tensors) floats += g->size();
      inbox.emplace_back(1, static_cast<int>(floats), stream);
      size_t pos = 0;
      for (const DeviceMatrix* g : tensors) {
        LOOM_CUDA_CHECK(cudaMemcpyAsync(inbox.back().data() + pos, g->data(), g->bytes(),
                                        cudaMemcpyDeviceToDevice, stream));
        pos += g->size();
      }
      LOOM_NCCL_CHECK(ncclSend(inbox.back().data(), floats, ncclFloat, 0, comms.world(), stream));
    }
    LOOM_NCCL_CHECK(ncclGroupEnd());
    LOOM_CUDA_CHECK(cudaStreamSynchronize(stream));
    for (int r = 1; r < n && rank == 0; ++r) {
      const std::vector<float> flat = inbox[static_cast<size_t>(r - 1)].download();
      size_t pos = 0;
      for (const auto& [key, size] : gradient_layout(schedule, *problem.model, r)) {
        out[static_cast<size_t>(r)][key].assign(flat.begin() + static_cast<long>(pos),
                                                flat.begin() + static_cast<long>(pos + size));
        pos += size;
      }
    }
    return out;
  }
};

}  // namespace

std::unique_ptr<Executor> make_cuda_executor() {
  if (kernels::cuda_device_count() == 0)
    throw InputError(
        "--backend cuda: no usable CUDA device (no GPU, or no driver: libcuda.so.1 missing); "
        "use --backend host");
  return std::make_unique<CudaExecutor>();
}

}  // namespace loom::exec
