// The `cuda` executor backend: one process per GPU. Each process runs one rank of the
// schedule (RANK / WORLD_SIZE from the launcher, bootstrap.hpp), on GPU LOCAL_RANK mod
// the visible device count. After the iteration every process gathers all ranks'
// timings and gradients, so each returns the same complete ExecResult (timeline and
// gradient check alike); process_rank() tells the CLI which process writes (rank 0).
#include <algorithm>
#include <exception>
#include <optional>

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
                                                         const Model& model, RankId rank) {
  std::vector<int> layers = rank_layers(schedule, rank);
  std::sort(layers.begin(), layers.end());
  layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
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
  int process_rank() const override { return cuda::launch_info_from_env().rank; }

  std::vector<ProfileRow> profile(const Model& model, const Sample& first_sample,
                                  const ProfileRequest& request) override {
    check_model_executable(model);
    check_no_experts(model, "the cuda backend");
    LOOM_CUDA_CHECK(
        cudaSetDevice(cuda::launch_info_from_env().local_rank % kernels::cuda_device_count()));
    return cuda::profile_cuda(model, first_sample, request);
  }

  ExecResult run(const ExecProblem& problem, const ExecOptions& options) override {
    const Schedule& schedule = *problem.schedule;
    check_model_executable(*problem.model);
    check_no_experts(*problem.model, "the cuda backend");
    check_schedule_executable(schedule);
    if (schedule.cp > 1)
      throw InputError(
          "parallel.cp: the cuda backend does not run context parallelism (ring "
          "attention) yet; the host backend does (--backend host), and `loom sim` "
          "models it");
    (void)match_operations(schedule);  // InfeasibleError when messages do not pair up
    const LaunchInfo info = cuda::launch_info_from_env(options.rendezvous_file);
    check_launch(schedule, info);
    LOOM_CUDA_CHECK(cudaSetDevice(info.local_rank % kernels::cuda_device_count()));
    const LayerGraph graph(*problem.model);
    Stream compute;
    std::optional<RankComms> comms_or;
    try {
      comms_or.emplace(schedule, info, options.timeout_s);
    } catch (...) {
      cuda::release_rendezvous(info);  // a failed launch leaves no stale file behind
      throw;
    }
    RankComms& comms = *comms_or;
    // Communicator setup is collective: every rank has read the rendezvous file by now.
    // Removing it lets the next iteration (--iterations) and the next launch meet anew.
    cuda::release_rendezvous(info);
    const RankId rank{info.rank};  // one process per rank of the schedule
    CudaRankBackend backend(problem, graph, comms, rank, compute.stream, options.timeout_s);
    try {
      backend.start_epoch();
      run_program(schedule, rank, backend, options);
      backend.finish();
    } catch (...) {
      comms.abort_all();  // peers blocked on this rank end with their own errors
      throw;
    }
    ExecResult result;
    result.timeline.timings = gather_timings(schedule, backend.timings(), comms, compute.stream);
    if (!options.collect_tensors) return result;  // every rank skips the gathers alike
    result.gradients = gather_tensors(
        problem, rank, [&](const auto& layers) { return backend.gradient_tensors(layers); }, false,
        comms, compute.stream);
    result.parameters = gather_tensors(
        problem, rank, [&](const auto& layers) { return backend.parameter_tensors(layers); }, true,
        comms, compute.stream);
    return result;
  }

 private:
  /// All-gather of every rank's (start, end) pairs, padded to the longest program.
  static PerRank<std::vector<OpTiming>> gather_timings(const Schedule& schedule,
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
    PerRank<std::vector<OpTiming>> out(n);
    for (const RankId r : schedule.rank_ids())
      for (size_t i = 0; i < schedule.programs[r].size(); ++i) {
        const size_t at = r.slot() * 2 * longest + 2 * i;
        out[r].push_back({gathered[at], gathered[at + 1]});
      }
    return out;
  }

  /// Every rank's gradients (or, with `after_optimizer_step`, its trainable parameters as
  /// its optimizer step left them; none from a rank without one), on every rank: each rank
  /// packs its tensors in gradient_layout order and broadcasts them (one NCCL group), so
  /// each process returns the same complete result and can run the check itself.
  template <class Tensors>
  static PerRank<Gradients> gather_tensors(const ExecProblem& problem, RankId rank,
                                           const Tensors& tensors_of, bool after_optimizer_step,
                                           RankComms& comms, cudaStream_t stream) {
    const Schedule& schedule = *problem.schedule;
    const int n = schedule.num_ranks();
    PerRank<std::vector<std::pair<ParamKey, size_t>>> layouts;
    PerRank<DeviceMatrix> flat;
    for (const RankId r : schedule.rank_ids()) {
      const auto& program = schedule.programs[r];
      const bool stepped = std::any_of(program.begin(), program.end(), [](const Op& op) {
        return std::holds_alternative<OptimizerStep>(op);
      });
      layouts.push_back(after_optimizer_step && !stepped
                            ? std::vector<std::pair<ParamKey, size_t>>{}
                            : gradient_layout(schedule, *problem.model, r));
      size_t floats = 0;
      for (const auto& [key, size] : layouts.back()) floats += size;
      flat.emplace_back(1, static_cast<int>(floats), stream);
    }
    std::vector<int> trainable;
    for (const auto& [key, size] : layouts[rank])
      if (trainable.empty() || trainable.back() != key.layer) trainable.push_back(key.layer);
    size_t pos = 0;
    for (const DeviceMatrix* g : tensors_of(trainable)) {
      LOOM_CUDA_CHECK(cudaMemcpyAsync(flat[rank].data() + pos, g->data(), g->bytes(),
                                      cudaMemcpyDeviceToDevice, stream));
      pos += g->size();
    }
    LOOM_NCCL_CHECK(ncclGroupStart());
    for (const RankId r : schedule.rank_ids()) {
      DeviceMatrix& buffer = flat[r];
      if (buffer.empty()) continue;  // every rank knows the sizes: skipped alike everywhere
      LOOM_NCCL_CHECK(ncclBroadcast(buffer.data(), buffer.data(), buffer.size(), ncclFloat,
                                    r.value(), comms.world(), stream));
    }
    LOOM_NCCL_CHECK(ncclGroupEnd());
    PerRank<Gradients> out(n);
    for (const RankId r : schedule.rank_ids()) {
      const std::vector<float> host = flat[r].download();
      size_t at = 0;
      for (const auto& [key, size] : layouts[r]) {
        out[r][key].assign(host.begin() + static_cast<long>(at),
                           host.begin() + static_cast<long>(at + size));
        at += size;
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
