#pragma once
/// One rank's model state on the GPU: the device twin of executor/host_state.hpp's
/// HostModelState, with the same data flow (executor/backend.hpp, "Data flow") and the
/// same numbers (parameters from init_parameters, the same synthetic inputs and targets,
/// the same loss), so a cuda run's gradients equal the sequential reference's.
///
/// Synthetic inputs and loss targets are generated on the host and uploaded when the
/// state is built (before the timed iteration, like a prefetching data loader), so no
/// timed operation does host work proportional to the data.
#include <cuda_runtime_api.h>

#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/schedule.hpp"
#include "executor/backend.hpp"
#include "executor/cuda/device_matrix.hpp"
#include "executor/cuda/layer_cuda.hpp"
#include "executor/dataflow.hpp"
#include "executor/model_state_base.hpp"

namespace loom::exec::cuda {

/// Rows per sample of layer `layer`'s output for these sample ids: its module's input
/// tokens, resampled by the module's token_ratio after its last layer (core/workload.hpp's
/// module_input_tokens, rounded as the host backend rounds). What travels on an edge out
/// of the layer, so a receiver sizes its buffer from the schedule alone.
std::vector<int> layer_output_lengths(const Model& model, const std::vector<Sample>& samples,
                                      const std::vector<SampleId>& ids, int layer);

class CudaModelState : public ModelStateBase<DeviceActivation, DeviceLayerState> {
 public:
  /// `program`: this rank's ops (to prefetch the synthetic data its forwards read).
  CudaModelState(const ExecProblem& problem, const LayerGraph& graph, ReplicaId replica,
                 const std::vector<int>& layers, const std::vector<Op>& program,
                 kernels::Blas& blas, cudaStream_t stream);

  void forward(const Compute& op);
  void backward_input(const Compute& op);   ///< I, and the first half of B
  void backward_weight(const Compute& op);  ///< W, and the second half of B

  /// The accumulated gradients of the trainable layers held here (downloads; syncs).
  Gradients gradients() const;
  /// The gradient tensors of `layers` in ParamKey order: what one all-reduce sums.
  std::vector<DeviceMatrix*> gradient_tensors(const std::vector<int>& layers);
  /// Adam (executor/adam.hpp, data_ops.hpp's kernel) on every trainable layer held here.
  void optimizer_step();
  /// The trainable layers' parameters (downloads; syncs).
  Parameters trained_parameters() const;
  /// The parameter tensors of trainable `layers` in ParamKey order (gradient_tensors').
  std::vector<DeviceMatrix*> parameter_tensors(const std::vector<int>& layers);

 private:
  /// (module key, microbatch, modality)
  using DataKey = std::tuple<int, MicrobatchId, std::string>;
  void prefetch(const std::vector<Op>& program);
  /// Uploads the weights of `layers` (those not yet on the device), initialised on every
  /// host core at once.
  void upload_parameters(std::vector<int> layers);
  /// Uploads the synthetic (module key, microbatch, modality) tensor: `lengths` rows per
  /// sample, or the samples' tokens of `modality` when null.
  void prefetch_one(int module_key, MicrobatchId microbatch, const std::string& modality, int width,
                    const std::vector<int>* lengths = nullptr);
  DeviceActivation synthetic(int module_key, MicrobatchId microbatch, const std::string& modality);
  DeviceActivation module_input(const Compute& op, bool redundant);
  const DeviceTensors& params(int layer);
  void loss_gradient(int layer, MicrobatchId microbatch, const DeviceActivation& y);

  cudaStream_t stream_;
  LayerRunner runner_;
  std::map<int, DeviceTensors> params_, grads_;
  std::map<ParamKey, std::pair<DeviceMatrix, DeviceMatrix>> moments_;  ///< Adam's m and v
  int optimizer_steps_ = 0;
  std::map<DataKey, DeviceActivation> data_;  ///< prefetched inputs and targets
};

}  // namespace loom::exec::cuda
