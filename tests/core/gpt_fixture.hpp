#pragma once
// A GPT-style model and one DGX-A100-like node, shared by the cost and memory model tests,
// and a kernel lookup for the kernel-level model's tests.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/cluster.hpp"
#include "core/layer_kernels.hpp"
#include "core/model.hpp"

namespace loom::test {

/// The kernel of `ks` named `name` (a test failure, and an empty kernel, when none is).
inline const Kernel& find_kernel(const std::vector<Kernel>& ks, const std::string& name) {
  for (const Kernel& k : ks)
    if (k.name == name) return k;
  ADD_FAILURE() << "no kernel " << name;
  static const Kernel kNone;
  return kNone;
}

inline LayerSpec gpt_layer(int h, int heads) {
  LayerSpec l;
  l.hidden = h;
  l.ffn = 4 * h;
  l.heads = heads;
  l.kv_heads = heads;
  l.causal = true;
  l.out_hidden = h;
  return l;
}

inline Model gpt(int layers, int h, int heads, int vocab = 0) {
  Module m;
  m.name = "gpt";
  m.vocab = vocab;
  m.layers.assign(static_cast<size_t>(layers), gpt_layer(h, heads));
  return Model({m});
}

inline Cluster a100_node() {
  Cluster c;
  c.gpus_per_node = 8;
  c.gpu = gpu_preset("A100-80GB");
  c.intra_node = {300e9, 2e-6};
  c.inter_node = {25e9, 5e-6};
  c.nics_per_node = 8;
  return c;
}

}  // namespace loom::test
