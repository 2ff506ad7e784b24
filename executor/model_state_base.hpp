#pragma once
/// What one rank's model state holds on the host and on the GPU alike
/// (executor/host_state.hpp, executor/cuda/model_state.hpp): the run it belongs to, the
/// replica its microbatches come from, the tensors waiting on edges (executor/backend.hpp,
/// "Data flow") and the per-(microbatch, layer) state between F, I and W. The two states
/// differ only in where the tensors live and how the math runs.
#include <utility>
#include <vector>

#include "core/index.hpp"
#include "core/model.hpp"
#include "core/workload.hpp"
#include "executor/backend.hpp"
#include "executor/dataflow.hpp"
#include "executor/edge_store.hpp"
#include "executor/layer_states.hpp"

namespace loom::exec {

template <class ActivationT, class LayerStateT>
class ModelStateBase {
 public:
  /// Edge tensors: Send takes one out, Recv puts one in.
  ActivationT take_edge(const EdgeKey& key) { return edges_.take(key); }
  void put_edge(const EdgeKey& key, ActivationT value) { edges_.put(key, std::move(value)); }

 protected:
  /// `replica`: which row of Schedule::samples this rank's microbatches come from.
  ModelStateBase(const ExecProblem& problem, const LayerGraph& graph, ReplicaId replica)
      : problem_(problem), graph_(graph), model_(*problem.model), replica_(replica) {
    for (const auto& per_replica : problem.schedule->samples) {
      for (const auto& mb : per_replica) batch_samples_ += isize(mb);
    }
  }
  std::vector<SampleId> samples_of(MicrobatchId microbatch) const {
    return problem_.schedule->samples_of(replica_, microbatch);
  }
  /// The sequences layer `layer`'s attention runs over in `microbatch`, whose rows per
  /// sample are `rows`: each sample's attention_items() (core/workload.hpp), so an encoder
  /// attends within each image and the LLM within each sample of a pack, as the cost model
  /// prices them; a sample whose rows are not its whole input (a CP rank's share of an LLM
  /// sequence) stays one sequence (no executor runs a pack under CP:
  /// check_context_parallel_executable).
  std::vector<int> attention_segments(int layer, MicrobatchId microbatch,
                                      const std::vector<int>& rows) const {
    const ModuleId module = model_.module_of(layer);
    const std::vector<const Sample*> batch =
        sample_batch(*problem_.samples, samples_of(microbatch));
    std::vector<int> segments;
    for (size_t s = 0; s < rows.size() && s < batch.size(); ++s) {
      const std::vector<int> items = attention_items(model_, module, *batch[s]);
      int sum = 0;
      for (int n : items) sum += n;
      if (sum == rows[s])
        segments.insert(segments.end(), items.begin(), items.end());
      else
        segments.push_back(rows[s]);
    }
    return segments;
  }

  const ExecProblem& problem_;
  const LayerGraph& graph_;
  const Model& model_;
  ReplicaId replica_;
  int batch_samples_ = 0;  ///< samples in the whole iteration (the loss normaliser)
  EdgeStore<ActivationT> edges_;
  LayerStates<LayerStateT> states_;
};

}  // namespace loom::exec
