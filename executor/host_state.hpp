#pragma once
/// One rank's model state on the host: the parameters of the layers it holds, their
/// accumulated gradients, the tensors waiting on edges (executor/backend.hpp, "Data
/// flow") and the per-(microbatch, layer) state between F, I and W. HostRankBackend
/// drives it op by op; the sequential reference drives it too, so both compute alike.
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "core/schedule.hpp"
#include "core/workload.hpp"
#include "executor/adam.hpp"
#include "executor/backend.hpp"
#include "executor/dataflow.hpp"
#include "executor/layer_math.hpp"
#include "executor/model_state_base.hpp"
#include "executor/ring_attention.hpp"

namespace loom::exec {

/// Rows of one microbatch on one edge: packed samples, `lengths` rows each.
struct Activation {
  Matrix x;
  std::vector<int> lengths;
};

class HostModelState : public ModelStateBase<Activation, LayerState> {
 public:
  /// `cp_rank`: the rank's CP rank (Schedule::cp_rank; 0 without context parallelism).
  HostModelState(const ExecProblem& problem, const LayerGraph& graph, ReplicaId replica,
                 const std::vector<int>& layers, int cp_rank = 0);

  void forward(const Compute& op);
  void backward_input(const Compute& op);   ///< I, and the first half of B
  void backward_weight(const Compute& op);  ///< W, and the second half of B

  /// Accumulated gradients of the trainable layers this rank holds.
  Gradients gradients() const;
  /// The gradient tensors of `layers` (in ParamKey order), flattened: an all-reduce's
  /// buffer. set_flat writes a reduced buffer back.
  std::vector<float> flat_gradients(const std::vector<int>& layers) const;
  void set_flat_gradients(const std::vector<int>& layers, const std::vector<float>& flat);
  /// Adam (executor/adam.hpp) on every trainable layer held here, with its gradients.
  void optimizer_step();
  /// The trainable layers' parameters (as the optimizer steps left them).
  Parameters trained_parameters() const;
  /// Sum of the per-sample losses seen by forwards (for reports).
  double loss() const { return loss_; }

  // Context parallelism (executor/ring_attention.hpp): the K/V exchange between a layer's
  // parts, by the messages' tags and by the collectives of cp_comm = "all-gather".
  Activation context_send(const MessageTag& tag);
  void context_receive(const MessageTag& tag, Activation message);
  /// The exchange of the layer whose first part ran last: an all-gather of K and V
  /// (`gather` concatenates every CP rank's buffer) or a reduce-scatter of dK, dV
  /// (`sum` adds them).
  using Rendezvous = std::function<std::vector<float>(std::vector<float>)>;
  void context_collective(CollectiveKind kind, const Rendezvous& exchange);

 private:
  /// What a layer split into parts keeps between its first and its last part.
  struct PartialForward {
    LayerState state;
    Activation input;
  };
  using LayerKey = std::pair<MicrobatchId, int>;
  bool split_into_parts(const Compute& op) const;
  void forward_part(const Compute& op);
  void backward_input_part(const Compute& op);
  void finish_forward(const Compute& op, Activation a);
  void send_input_gradient(const Compute& op, Matrix g);
  KvExchange& exchange(const MessageTag& tag);

  Activation module_input(const Compute& op, bool redundant);
  const LayerTensors& params(int layer);
  /// Deterministic data of one stream: `key` is a module's id for its inputs, -1 - layer for
  /// a layer's loss target.
  Activation synthetic(int key, const std::vector<SampleId>& samples, const std::string& modality,
                       int width, const std::vector<int>* lengths = nullptr) const;
  void loss_gradient(int layer, MicrobatchId microbatch, const Activation& y);

  std::map<int, LayerTensors> params_, grads_;
  std::map<ParamKey, AdamState> adam_;
  double loss_ = 0;
  int cp_ = 1, cp_rank_ = 0;
  std::map<LayerKey, PartialForward> partial_forward_;
  std::map<LayerKey, Matrix> partial_dq_;  ///< the queries' gradients between backward parts
  std::map<LayerKey, KvExchange> exchanges_;
  LayerKey current_part_{MicrobatchId{0}, 0};  ///< the layer whose first part ran last
};

}  // namespace loom::exec

namespace loom::exec {
/// Throws InputError when the host math cannot run the model: layer shapes (see
/// check_executable) or a module whose input width differs from a producer's output width.
void check_model_executable(const Model& model);
}  // namespace loom::exec
