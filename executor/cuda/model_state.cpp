#include "executor/cuda/model_state.hpp"

#include <algorithm>
#include <cmath>
#include <future>
#include <thread>

#include "core/index.hpp"
#include "core/workload.hpp"
#include "executor/cuda/data_ops.hpp"
#include "executor/layer_math.hpp"
#include "executor/sample_rows.hpp"
#include "executor/synthetic_data.hpp"
#include "executor/tensor.hpp"
#include "kernels/cuda/check.hpp"
#include "kernels/cuda/elementwise.hpp"

namespace loom::exec::cuda {
namespace {

int total(const std::vector<int>& v) {
  int t = 0;
  for (int x : v) t += x;
  return t;
}

const std::string kTarget = "target", kTargetScale = "target-scale";

/// The tensors of `layers` in ParamKey order (layer, then name): one collective's buffers.
std::vector<DeviceMatrix*> tensors_of(std::map<int, DeviceTensors>& by_layer,
                                      const std::vector<int>& layers) {
  std::vector<DeviceMatrix*> out;
  for (int l : layers)
    for (auto& [name, m] : by_layer.at(l)) out.push_back(&m);
  return out;
}

/// One block of a PackPlan or unpack_part, on `stream` (both tensors `to.cols()` wide).
void copy_rows(const DeviceMatrix& from, const RowBlock& b, DeviceMatrix& to, cudaStream_t stream) {
  const auto cols = static_cast<size_t>(to.cols());
  LOOM_CUDA_CHECK(cudaMemcpyAsync(to.data() + static_cast<size_t>(b.to_row) * cols,
                                  from.data() + static_cast<size_t>(b.from_row) * cols,
                                  static_cast<size_t>(b.rows) * cols * sizeof(float),
                                  cudaMemcpyDeviceToDevice, stream));
}

}  // namespace

std::vector<int> layer_output_lengths(const Model& model, const std::vector<Sample>& samples,
                                      const std::vector<SampleId>& ids, int layer) {
  const ModuleId module = model.module_of(layer);
  const double ratio = model.module(module).token_ratio;
  std::vector<int> lengths;
  for (const Sample* sample : sample_batch(samples, ids)) {
    const int in = module_input_tokens(model, module, *sample);
    lengths.push_back(is_module_last(model, layer) && ratio != 1.0
                          ? static_cast<int>(std::round(in * ratio))
                          : in);
  }
  return lengths;
}

CudaModelState::CudaModelState(const ExecProblem& problem, const LayerGraph& graph,
                               ReplicaId replica, const std::vector<int>& layers,
                               const std::vector<Op>& program, kernels::Blas& blas,
                               cudaStream_t stream)
    : ModelStateBase(problem, graph, replica), stream_(stream), runner_(blas, stream) {
  // Every layer's weights up front, redundant copies' too: a lazy upload mid-run would
  // synchronise the stream.
  std::vector<int> needed = layers;
  for (const Op& op : program) {
    if (const auto* c = std::get_if<Compute>(&op))
      for (int l = c->first_layer; l < c->end_layer; ++l) needed.push_back(l);
  }
  upload_parameters(std::move(needed));
  for (int l : layers) {
    if (model_.layer(l).frozen) continue;
    for (const auto& [name, m] : zero_parameters(model_.layer(l)))
      grads_[l][name] = DeviceMatrix::zeros(m.rows, m.cols, stream_);
  }
  prefetch(program);
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream_));  // uploads done: host copies may go
}

void CudaModelState::upload_parameters(std::vector<int> layers) {
  std::sort(layers.begin(), layers.end());
  layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
  std::erase_if(layers, [&](int l) { return params_.count(l) > 0; });
  // init_parameters is a pure function of (seed, layer): layers initialise in parallel, a
  // batch per host core at a time to bound host memory (one thread took 15 s for the
  // 1.6B parameters of configs/examples/vlm-frozen.toml).
  const size_t batch = std::max(1U, std::thread::hardware_concurrency());
  for (size_t from = 0; from < layers.size(); from += batch) {
    const size_t to = std::min(layers.size(), from + batch);
    std::vector<std::future<LayerTensors>> host;
    for (size_t i = from; i < to; ++i) {
      host.push_back(std::async(std::launch::async, [this, l = layers[i]] {
        return init_parameters(model_.layer(l), l, problem_.seed);
      }));
    }
    for (size_t i = from; i < to; ++i) {
      const LayerTensors tensors = host[i - from].get();
      DeviceTensors& device = params_[layers[i]];
      for (const auto& [name, m] : tensors)
        device[name] = DeviceMatrix::upload(m.rows, m.cols, m.data, stream_);
      // Synchronous: the host tensors die at the end of this iteration.
      LOOM_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
  }
}

const DeviceTensors& CudaModelState::params(int layer) {
  if (params_.count(layer) == 0) upload_parameters({layer});
  return params_.at(layer);
}

void CudaModelState::prefetch_one(int module_key, MicrobatchId microbatch,
                                  const std::string& modality, int width,
                                  const std::vector<int>* given) {
  if (data_.count({module_key, microbatch, modality}) > 0) return;
  const std::vector<SampleId> samples = samples_of(microbatch);
  const std::vector<int> lengths =
      given != nullptr ? *given : modality_lengths(*problem_.samples, samples, modality);
  // executor/synthetic_data.hpp: the host backend's and the reference's data, bit for bit.
  const Matrix host = synthetic_data(problem_.seed, module_key, modality, samples, lengths, width);
  DeviceActivation a{DeviceMatrix::upload(host.rows, host.cols, host.data, stream_), lengths};
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  data_[{module_key, microbatch, modality}] = std::move(a);
}

void CudaModelState::prefetch(const std::vector<Op>& program) {
  for (const Op& op : program) {
    const Compute* c = std::get_if<Compute>(&op);
    if (c == nullptr) continue;
    if (c->pass != Pass::kF || is_redundant(*c)) continue;
    const ModuleId module = model_.module_of(c->first_layer);
    const Module& mod = model_.module(module);
    const int width = input_width(model_.layer(c->first_layer));
    if (graph_.producers(c->first_layer).empty())
      prefetch_one(module.value(), c->microbatch, mod.modality, width);
    else if (mod.kind == ModuleKind::kLlm && is_module_first(model_, c->first_layer))
      prefetch_one(module.value(), c->microbatch, "text", width);
    const int last = c->end_layer - 1;
    if (!graph_.is_loss_layer(last)) continue;
    // The loss's target and its per-row normaliser 1 / (B T_s w) (host_state.cpp's loss).
    // The target has the loss layer's output shape (host_state.cpp passes y's lengths).
    const int out = output_width(model_.layer(last));
    const std::vector<int> y_lengths =
        layer_output_lengths(model_, *problem_.samples, samples_of(c->microbatch), last);
    prefetch_one(-1 - last, c->microbatch, kTarget, out, &y_lengths);
    std::vector<float> scale;
    const std::vector<int> lengths = data_.at({-1 - last, c->microbatch, kTarget}).lengths;
    for (int len : lengths)
      scale.insert(scale.end(), static_cast<size_t>(len),
                   static_cast<float>(1.0 / (static_cast<double>(batch_samples_) * len * out)));
    data_[{-1 - last, c->microbatch, kTargetScale}] = {
        DeviceMatrix::upload(isize(scale), 1, scale, stream_), lengths};
    LOOM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
}

DeviceActivation CudaModelState::synthetic(int module_key, MicrobatchId microbatch,
                                           const std::string& modality) {
  const DeviceActivation& a = data_.at({module_key, microbatch, modality});
  return {a.x.clone(stream_), a.lengths};
}

DeviceActivation CudaModelState::module_input(const Compute& op, bool redundant) {
  const int first = op.first_layer;
  const ModuleId module = model_.module_of(first);
  const Module& mod = model_.module(module);
  const int width = input_width(model_.layer(first));
  const auto& producers = graph_.producers(first);
  if (producers.empty() && !redundant)
    return synthetic(module.value(), op.microbatch, mod.modality);
  if (redundant) {  // its output feeds nothing: the right shape is all that matters
    std::vector<int> lengths;
    for (const Sample* sample : sample_batch(*problem_.samples, samples_of(op.microbatch)))
      lengths.push_back(module_input_tokens(model_, module, *sample));
    return {DeviceMatrix::zeros(total(lengths), width, stream_), lengths};
  }
  std::vector<DeviceActivation> parts;
  for (int p : producers) parts.push_back(take_edge({Pass::kF, op.microbatch, p, first}));
  if (!is_module_first(model_, first)) return std::move(parts.front());
  // Per sample: the rows of each producer in global layer order, then an LLM's own text.
  if (mod.kind == ModuleKind::kLlm)
    parts.push_back(synthetic(module.value(), op.microbatch, "text"));
  std::vector<std::vector<int>> pieces;
  int rows = 0;
  for (const DeviceActivation& part : parts) {
    pieces.push_back(part.lengths);
    rows += part.x.rows();
  }
  PackPlan plan = pack_samples(pieces, isize(samples_of(op.microbatch)));
  edges_.put_packing(op.microbatch, first, std::move(pieces));
  DeviceActivation a{DeviceMatrix(rows, width, stream_), std::move(plan.lengths)};
  for (const RowBlock& b : plan.blocks)
    copy_rows(parts[static_cast<size_t>(b.part)].x, b, a.x, stream_);
  for (DeviceActivation& part : parts) part.x.use_on(stream_);  // freed after the copies
  return a;
}

void CudaModelState::forward(const Compute& op) {
  const bool redundant = is_redundant(op);
  DeviceActivation a = module_input(op, redundant);
  for (int l = op.first_layer; l < op.end_layer; ++l) {
    DeviceLayerState st;
    a.x = runner_.forward(model_.layer(l), params(l), a.x,
                          attention_segments(l, op.microbatch, a.lengths), st);
    st.sample_lengths = a.lengths;
    if (!redundant && model_.has_trainable_upstream(l))
      states_.put(op.microbatch, l, std::move(st));
    const double ratio = model_.module(model_.module_of(l)).token_ratio;
    if (is_module_last(model_, l) && ratio != 1.0) {
      const std::vector<int> out = resampled_lengths(a.lengths, ratio);
      a = {resample_forward(a.x, a.lengths, out, stream_), out};
    }
  }
  if (redundant) return;
  if (graph_.is_loss_layer(op.end_layer - 1))
    loss_gradient(op.end_layer - 1, op.microbatch, a);
  else
    edges_.put_forward_outputs(graph_, op, std::move(a), [&](const DeviceActivation& x) {
      return DeviceActivation{x.x.clone(stream_), x.lengths};
    });
}

void CudaModelState::loss_gradient(int layer, MicrobatchId microbatch, const DeviceActivation& y) {
  const DeviceActivation& target = data_.at({-1 - layer, microbatch, kTarget});
  const DeviceActivation& scale = data_.at({-1 - layer, microbatch, kTargetScale});
  edges_.put_loss_gradient(microbatch, layer,
                           {mse_gradient(y.x, target.x, scale.x, stream_), y.lengths});
}

void CudaModelState::backward_input(const Compute& op) {
  const MicrobatchId mb = op.microbatch;
  const int first = op.first_layer, last = op.end_layer - 1;
  if (!model_.has_trainable_upstream(last)) return;  // Eq 3.3: no backward at all
  DeviceMatrix g =
      edges_.take_output_gradient(graph_, op, [&](DeviceMatrix& sum, DeviceMatrix& part) {
        kernels::residual_add(static_cast<std::int64_t>(sum.size()), sum.data(), part.data(),
                              sum.data(), stream_);
        part.use_on(stream_);  // freed after the add
      });
  const std::vector<EdgeKey> outs = backward_outputs(graph_, op);
  for (int l = last; l >= first; --l) {
    DeviceLayerState& st = states_.of_forward(mb, l);
    const double ratio = model_.module(model_.module_of(l)).token_ratio;
    if (is_module_last(model_, l) && ratio != 1.0)
      g = resample_backward(g, st.sample_lengths, resampled_lengths(st.sample_lengths, ratio),
                            stream_);
    const bool need_dx = l > first ? model_.has_trainable_upstream(l - 1) : !outs.empty();
    g = runner_.backward_input(model_.layer(l), params(l), st, g, need_dx);
    if (model_.layer(l).frozen) states_.erase(mb, l);  // W has nothing to do for it
    if (!need_dx) return;
  }
  edges_.put_input_gradient(
      model_, graph_, op, std::move(g), outs,
      [&](const DeviceMatrix& packed, const std::vector<int>& lengths,
          const std::vector<RowBlock>& blocks) {
        DeviceActivation part{DeviceMatrix(total(lengths), packed.cols(), stream_), lengths};
        for (const RowBlock& b : blocks) copy_rows(packed, b, part.x, stream_);
        return part;
      });
}

void CudaModelState::backward_weight(const Compute& op) {
  states_.backward_weight(op, [&](int layer, DeviceLayerState& st) {
    runner_.backward_weight(model_.layer(layer), st, grads_.at(layer));
  });
}

Gradients CudaModelState::gradients() const {
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  Gradients out;
  for (const auto& [layer, tensors] : grads_)
    for (const auto& [name, m] : tensors) out[{layer, name}] = m.download();
  return out;
}

std::vector<DeviceMatrix*> CudaModelState::gradient_tensors(const std::vector<int>& layers) {
  return tensors_of(grads_, layers);
}

void CudaModelState::optimizer_step() {
  ++optimizer_steps_;
  for (auto& [layer, tensors] : grads_) {
    DeviceTensors& params = params_.at(layer);
    for (auto& [name, grad] : tensors) {
      auto it = moments_.find({layer, name});
      if (it == moments_.end()) {
        it = moments_
                 .emplace(ParamKey{layer, name},
                          std::pair{DeviceMatrix::zeros(grad.rows(), grad.cols(), stream_),
                                    DeviceMatrix::zeros(grad.rows(), grad.cols(), stream_)})
                 .first;
      }
      adam_step(params.at(name), grad, it->second.first, it->second.second, optimizer_steps_,
                stream_);
    }
  }
}

Parameters CudaModelState::trained_parameters() const {
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  Parameters out;
  for (const auto& [layer, tensors] : grads_)
    for (const auto& [name, m] : params_.at(layer)) out[{layer, name}] = m.download();
  return out;
}

std::vector<DeviceMatrix*> CudaModelState::parameter_tensors(const std::vector<int>& layers) {
  return tensors_of(params_, layers);
}

}  // namespace loom::exec::cuda
