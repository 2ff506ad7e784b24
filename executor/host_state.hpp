#pragma once
/// One rank's model state on the host: the parameters of the layers it holds, their
/// accumulated gradients, the tensors waiting on edges (executor/backend.hpp, "Data
/// flow") and the per-(microbatch, layer) state between F, I and W. HostRankBackend
/// drives it op by op; the sequential reference drives it too, so both compute alike.
#include <functional>
#include <map>
#include <tuple>
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
  /// `experts`: the rank's place in its expert-parallel group (which experts it holds).
  HostModelState(const ExecProblem& problem, const LayerGraph& graph, ReplicaId replica,
                 const std::vector<int>& layers, int cp_rank = 0, ExpertGroup experts = {});

  void forward(const Compute& op);
  void backward_input(const Compute& op);   ///< I, and the first half of B
  void backward_weight(const Compute& op);  ///< W, and the second half of B

  /// Accumulated gradients of the trainable layers this rank holds.
  Gradients gradients() const;
  /// Those layers, in order.
  const std::vector<int>& trained_layers() const { return trained_layers_; }
  /// The gradient tensors of `layers` (in ParamKey order), flattened: an all-reduce's
  /// buffer. set_flat writes a reduced buffer back.
  /// Under expert parallelism an all-reduce sums either the experts' gradients (over the
  /// ranks holding the same experts) or everything else (over the data-parallel group).
  enum class Reduced { kAll, kDense, kExperts };
  std::vector<float> flat_gradients(const std::vector<int>& layers,
                                    Reduced reduced = Reduced::kAll) const;
  void set_flat_gradients(const std::vector<int>& layers, const std::vector<float>& flat,
                          Reduced reduced = Reduced::kAll);
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
  /// Ulysses (cp_comm = "a2a"): the next all-to-all of `layer`, whose first part ran last
  /// (HeadExchange: Q, K, V or the output's gradient out by heads, the output or dQ, dK,
  /// dV back by rows).
  using AllToAll = std::function<std::vector<std::vector<float>>(std::vector<std::vector<float>>)>;
  void context_all_to_all(int layer, const AllToAll& exchange);

  // Expert parallelism (executor/moe_math.hpp): the all-to-all after a MoE layer's part
  // moves the token copies that part left for each member of the group; `exchange` sends
  // one buffer per member and returns one from each.
  void expert_collective(const AllToAll& exchange);

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
  /// The layer's K/V exchange, made from its first part's K and V at its first message.
  KvExchange& exchange(const LayerKey& key);

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
  std::map<LayerKey, HeadExchange> heads_;     ///< Ulysses' exchanges, forward to backward
  LayerKey current_part_{MicrobatchId{0}, 0};  ///< the layer whose first part ran last

  /// A MoE layer's pass between its parts under expert parallelism: forward (attention,
  /// route | experts | combine) or backward (combine's gradient | experts' | the rest).
  struct MoeFlight {
    int parts = 0;     ///< parts run so far
    Activation input;  ///< forward: the layer's input
    LayerState state;  ///< forward: the layer's state until its last part
    Matrix x2;         ///< forward: the residual stream before the MLP
    Matrix dy;         ///< backward: the layer output's gradient
    Exchange outbox;   ///< what the next all-to-all sends, per member
    Exchange inbox;    ///< what the last one brought, per member
  };
  using FlightKey = std::tuple<bool, MicrobatchId, int>;  ///< (backward?, microbatch, layer)
  bool expert_part(const Compute& op) const;
  void forward_expert_part(const Compute& op);
  void backward_expert_part(const Compute& op);
  ExpertGroup experts_;
  std::vector<int> trained_layers_;
  std::map<FlightKey, MoeFlight> flights_;
  FlightKey last_flight_{false, MicrobatchId{0}, 0};  ///< the flight whose part ran last
};

}  // namespace loom::exec

namespace loom::exec {
/// Throws InputError when the host math cannot run the model: layer shapes (see
/// check_executable) or a module whose input width differs from a producer's output width.
void check_model_executable(const Model& model);
/// Throws InputError naming the first mixture-of-experts module: `what` ("the cuda backend",
/// "profiling") does not run experts yet; the host backend's run does.
void check_no_experts(const Model& model, const std::string& what);
}  // namespace loom::exec
