#pragma once
/// What each operation of a schedule reads and writes, derived from the IR and the model
/// DAG alone, so every backend moves the same tensors (executor/backend.hpp, "Data flow"):
/// the per-op edges come from core/dataflow.hpp; the gradient buckets of collectives and
/// the layers a rank holds are the executor's own questions.
#include <functional>
#include <map>
#include <vector>

#include "core/dataflow.hpp"
#include "core/model.hpp"
#include "core/schedule.hpp"
#include "executor/backend.hpp"

namespace loom::exec {

// What each compute reads and writes is core's dependency oracle, shared with the
// lowering and the validator.
using loom::backward_inputs;
using loom::backward_outputs;
using loom::forward_inputs;
using loom::forward_outputs;
using loom::LayerGraph;

/// Which layers' gradients each all-reduce of a rank sums: a gradient bucket
/// (Collective::first_layer/end_layer) the trainable layers of its range this rank
/// computes; otherwise the trainable layers of the op's module this rank computes (its
/// non-redundant forwards), at the module's first
/// all-reduce on this rank; trainable layers of a module without an all-reduce of its own
/// join the last of those (a stage that spans projector and LLM reduces both in one
/// bucket). A tied-embedding all-reduce (Collective::tied_embedding) sums none of them:
/// the executors' math has no embedding. Keyed by op index.
/// `experts_only`: the all-reduces that sum only the routed experts (expert parallelism's
/// own group), which take no module's layers here.
std::map<std::size_t, std::vector<int>> allreduce_layers(
    const Schedule& schedule, const Model& model, RankId rank,
    const std::function<bool(const Collective&)>& experts_only = {});

/// Whether a compute is a redundant forward-only copy (issue 3's Compute::redundant, when
/// the IR has it): it costs time but its output feeds nothing and it trains nothing.
template <class C>
bool is_redundant(const C& op) {
  if constexpr (requires { op.redundant; }) {
    return op.redundant;
  } else {
    return false;
  }
}

/// Whether `layer` is its module's first (it reads the module's packed input) or last (the
/// module's token_ratio resamples its output).
inline bool is_module_first(const Model& model, int layer) {
  return model.layer_ref(layer).local_index == 0;
}
inline bool is_module_last(const Model& model, int layer) {
  const LayerRef& ref = model.layer_ref(layer);
  return ref.local_index + 1 == static_cast<int>(model.module(ref.module).layers.size());
}

/// Throws InfeasibleError naming the first op when the schedule shards parameters (FSDP,
/// parallel.fsdp: reduce-scatters and computes that wait for prefetched all-gathers): the
/// executors keep every rank's parameters whole and run no sharded optimizer.
void check_schedule_executable(const Schedule& schedule);

/// The layers a rank holds parameters for: those of its non-redundant forward computes.
std::vector<int> rank_layers(const Schedule& schedule, RankId rank);

}  // namespace loom::exec
