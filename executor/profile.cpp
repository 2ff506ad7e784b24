#include "executor/profile.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "core/errors.hpp"
#include "core/io.hpp"
#include "executor/backend.hpp"
#include "executor/layer_math.hpp"

namespace loom::exec {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

/// F, I, W medians of one layer at one token count (one sequence of `tokens`).
std::array<double, 3> time_layer(const LayerSpec& spec, int head_dim, int tokens, int repeats,
                                 std::uint64_t seed) {
  const LayerTensors params = init_parameters(spec, 0, seed, head_dim);
  Matrix x(tokens, input_width(spec));
  for (size_t i = 0; i < x.size(); ++i) x.data[i] = hash_uniform(hash_combine(seed, i));
  Matrix dy(tokens, output_width(spec));
  for (size_t i = 0; i < dy.size(); ++i)
    dy.data[i] = 1e-3F * hash_uniform(hash_combine(seed + 1, i));
  const std::vector<int> lengths = {tokens};
  std::array<std::vector<double>, 3> t;
  for (int r = 0; r <= repeats; ++r) {  // r == 0 warms caches and the allocator
    LayerState st;
    st.lengths = lengths;
    auto start = Clock::now();
    layer_forward(spec, params, x, lengths, &st);
    const double f = seconds_since(start);
    start = Clock::now();
    layer_backward_input(spec, params, st, dy, lengths, true);
    const double i = seconds_since(start);
    LayerTensors grads = zero_parameters(spec, head_dim);
    start = Clock::now();
    layer_backward_weight(spec, st, grads);
    const double w = seconds_since(start);
    if (r == 0) continue;
    t[0].push_back(f);
    t[1].push_back(i);
    t[2].push_back(w);
  }
  return {median(t[0]), median(t[1]), median(t[2])};
}

}  // namespace

bool tp_shard(const LayerSpec& spec, int tp, LayerSpec* shard) {
  *shard = spec;
  if (tp == 1) return true;
  if (spec.ffn % tp != 0) return false;
  shard->ffn = spec.ffn / tp;
  if (spec.kind == LayerKind::kMlp) return true;
  if (spec.heads % tp != 0) return false;
  // Heads split across the group; a layer with fewer KV heads than GPUs replicates them.
  shard->heads = spec.heads / tp;
  shard->kv_heads = std::max(1, spec.kv_heads / tp);
  if (shard->heads % shard->kv_heads != 0) return false;
  // The residual stream stays `hidden` wide; each shard keeps the head width (profile_host
  // passes it), so Q/K/V/O and the MLP shrink by t and norms do not.
  return true;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::vector<ProfileRow> profile_sweep(const Model& model, const Sample& first_sample,
                                      const ProfileRequest& request, const LayerTimer& time) {
  std::vector<ProfileRow> rows;
  for (const ModuleId m : model.modules().ids()) {
    const Module& mod = model.module(m);
    LayerSpec spec = mod.layers.front();
    spec.frozen = false;  // measure W too; the cost model applies frozen status (Eq 3.2)
    std::vector<int> sweep = request.tokens;
    if (sweep.empty()) {
      const int base = std::max(4, module_input_tokens(model, m, first_sample));
      for (double f : {0.25, 0.5, 1.0, 1.5, 2.0})
        sweep.push_back(std::max(1, static_cast<int>(std::lround(base * f))));
    }
    // Each shard keeps the whole layer's head width (tp_shard).
    const int head_dim = spec.kind == LayerKind::kMlp ? 0 : spec.hidden / spec.heads;
    for (int tp : request.tp) {
      LayerSpec shard;
      if (!tp_shard(spec, tp, &shard)) continue;
      for (const int tokens : sweep) {
        const std::array<double, 3> t =
            time(shard, head_dim, tokens, request.repeats, request.seed);
        const char phases[3] = {'F', 'I', 'W'};
        for (size_t p = 0; p < t.size(); ++p)
          rows.push_back({mod.name, phases[p], tokens, tp, t[p]});
      }
      if (request.on_progress)
        request.on_progress(mod.name, (m.value() + 1.0) / model.modules().ssize());
    }
  }
  return rows;
}

std::vector<ProfileRow> profile_host(const Model& model, const Sample& first_sample,
                                     const ProfileRequest& request) {
  enable_flush_to_zero();  // as every rank thread does (executor/tensor.hpp)
  return profile_sweep(model, first_sample, request, time_layer);
}

std::vector<ProfileRow> Executor::profile(const Model& /*model*/, const Sample& /*first_sample*/,
                                          const ProfileRequest& /*request*/) {
  throw InputError("--backend " + name() + ": this backend cannot profile layers");
}

void write_profile_csv(const std::string& path, const std::vector<ProfileRow>& rows) {
  std::ofstream out = open_for_write(path);
  out << "layer,phase,tokens,tp,seconds\n";
  for (const ProfileRow& r : rows) {
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.9g", r.seconds);
    out << r.layer << ',' << r.phase << ',' << r.tokens << ',' << r.tp << ',' << seconds << '\n';
  }
  finish_write(out, path);
}

}  // namespace loom::exec
