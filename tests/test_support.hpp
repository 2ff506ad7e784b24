#pragma once
// Shared helpers for Loom's tests: example configs by name, temporary files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "app/study.hpp"
#include "core/errors.hpp"
#include "core/index.hpp"

namespace loom::test {

inline std::string source_path(const std::string& relative) {
  return std::string(LOOM_SOURCE_DIR) + "/" + relative;
}

inline std::unique_ptr<Study> example(const std::string& name,
                                      const std::vector<std::string>& overrides = {}) {
  return prepare_study(source_path("configs/examples/" + name), overrides);
}

/// configs/examples/uniform-1f1b.toml run by `scheduler` on pp ranks, m microbatches and
/// `layers` identical layers, planned for the evaluator; `extra` overrides follow.
inline std::unique_ptr<Study> uniform_llm(const std::string& scheduler, int pp, int m,
                                          int layers = 8, std::vector<std::string> extra = {}) {
  std::vector<std::string> overrides = {
      "schedule.name=" + scheduler, "parallel.pp=" + std::to_string(pp),
      "schedule.microbatches=" + std::to_string(m),
      "model.modules.llm.layers=" + std::to_string(layers), "sim.backend=evaluator"};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return example("uniform-1f1b.toml", overrides);
}

/// What `f` throws as InputError, or "(no InputError)".
inline std::string input_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

/// Narayanan et al.'s 39.1B Megatron GPT (validation/megatron-narayanan-2021: TP 8 x PP
/// 2, tied embedding of 51,200 x 8,192, analytical costs) shrunk to two replicas of four
/// microbatches: the lowering's Megatron features on a real model, planned in milliseconds.
inline std::unique_ptr<Study> megatron_gpt(std::vector<std::string> overrides = {}) {
  overrides.insert(overrides.begin(),
                   {"parallel.dp=2", "cluster.nodes=4", "schedule.microbatches=4"});
  return prepare_study(source_path("validation/megatron-narayanan-2021/n1-39.1b.toml"), overrides);
}

inline std::unique_ptr<Study> fixture(const std::string& name,
                                      const std::vector<std::string>& overrides = {}) {
  return prepare_study(source_path("tests/data/" + name), overrides);
}

/// A small transformer module (hidden 64, ffn 256, 4 heads) of `layers` identical layers,
/// for model and cost tests that build the module graph by hand.
inline Module tiny_module(const std::string& name, ModuleKind kind, int layers, bool frozen,
                          std::vector<std::string> inputs = {}) {
  Module m;
  m.name = name;
  m.kind = kind;
  m.modality = kind == ModuleKind::kLlm ? "text" : "vision";
  m.inputs = std::move(inputs);
  LayerSpec l;
  l.hidden = 64;
  l.ffn = 256;
  l.heads = 4;
  l.kv_heads = 4;
  l.frozen = frozen;
  m.layers.assign(static_cast<size_t>(layers), l);
  return m;
}

/// A bare one-module schedule with one rank per entry of `gpus` (rank r on gpus[r]) and
/// empty programs, for tests that write the ops by hand.
inline Schedule ranks_on(const std::vector<int>& gpus) {
  Schedule s;
  s.module_names = {"m"};
  s.num_stages = isize(gpus);
  s.microbatches = 1;
  for (int gpu : gpus) s.ranks.push_back({.gpu = gpu, .tp = 1});
  s.programs.resize(isize(gpus));
  s.static_memory.resize(gpus.size());
  s.samples = {{{SampleId{0}}}};
  return s;
}

/// Hand-built ops of a one-module schedule (module 0): a compute of layers [first, end) of
/// `stage`, and the message of an edge into `boundary_layer` (F activations, B gradients).
inline Compute compute_op(Pass pass, int stage, int microbatch, int first, int end,
                          double seconds) {
  return Compute{.pass = pass,
                 .stage = StageId{stage},
                 .microbatch = MicrobatchId{microbatch},
                 .module = ModuleId{0},
                 .first_layer = first,
                 .end_layer = end,
                 .seconds = seconds};
}
inline MessageTag edge_tag(Pass pass, int microbatch, int boundary_layer) {
  return MessageTag{
      .pass = pass, .microbatch = MicrobatchId{microbatch}, .boundary_layer = boundary_layer};
}
inline Send send_op(RankId peer, int stage, MessageTag tag, double bytes) {
  return Send{
      .peer = peer, .stage = StageId{stage}, .module = ModuleId{0}, .tag = tag, .bytes = bytes};
}
inline Recv recv_op(RankId peer, int stage, MessageTag tag, double bytes) {
  return Recv{
      .peer = peer, .stage = StageId{stage}, .module = ModuleId{0}, .tag = tag, .bytes = bytes};
}
inline Collective allreduce_op(int group, double bytes) {
  return Collective{.kind = CollectiveKind::kAllReduce,
                    .group = GroupId{group},
                    .stage = StageId{0},
                    .bytes = bytes};
}

/// Two replicas of one rank (GPUs 0 and 1) that overlap their gradient all-reduce with
/// the backward: each runs `compute_s` of backward, issues an async bucket of `bytes`,
/// runs `compute_s` more, issues a second bucket and steps the optimizer (0.1 ms).
inline Schedule overlapped_buckets(double compute_s, double bytes) {
  Schedule s = ranks_on({0, 1});
  s.groups = {{0_rank, 1_rank}};
  const Collective bucket{.kind = CollectiveKind::kAllReduce, .bytes = bytes, .async = true};
  for (auto& program : s.programs) {
    program = {compute_op(Pass::kB, 0, 0, 1, 2, compute_s), bucket,
               compute_op(Pass::kB, 0, 0, 0, 1, compute_s), bucket, OptimizerStep{.seconds = 1e-4}};
  }
  return s;
}

/// Two replicas of one rank (GPUs 0 and 1) under FSDP's prefetch (lowering/pass_fsdp.cpp):
/// each issues the all-gathers of two layers' `bytes` parameters, runs layer 0's forward
/// (`compute_s`) once the first has ended, then layer 1's once the second has, at once
/// layer 2's (no parameters to wait for), and reduce-scatters `bytes` of gradients.
inline Schedule prefetched_gathers(double compute_s, double bytes) {
  Schedule s = ranks_on({0, 1});
  s.groups = {{0_rank, 1_rank}};
  const Collective gather{.kind = CollectiveKind::kAllGather, .bytes = bytes, .async = true};
  const Collective reduce{.kind = CollectiveKind::kReduceScatter, .bytes = bytes, .async = true};
  Compute first = compute_op(Pass::kF, 0, 0, 0, 1, compute_s);
  Compute second = compute_op(Pass::kF, 0, 0, 1, 2, compute_s);
  first.async_pending = 1;  // not the second layer's gather
  second.async_pending = 0;
  const Compute third = compute_op(Pass::kF, 0, 0, 2, 3, compute_s);
  for (auto& program : s.programs) program = {gather, gather, first, second, third, reduce};
  return s;
}

/// Nodes of `gpus` test GPUs: 10 GB/s, 2 us intra-node; 5 GB/s, 10 us inter-node, so a
/// route's time is easy to write down (see core/cluster.hpp for how routes add up).
inline Cluster small_cluster(int nodes, int gpus) {
  Cluster c;
  c.nodes = nodes;
  c.gpus_per_node = gpus;
  c.gpu = {"test", 1e12, 1e12, 80e9};
  c.intra_node = {10e9, 2e-6};
  c.inter_node = {5e9, 10e-6};
  return c;
}

/// A file under the test's temporary directory, removed with it.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            ("loom-test-" + std::string(info->test_suite_name()) + "-" + info->name() + "-" +
             std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string write(const std::string& name, const std::string& content) const {
    const auto p = path_ / name;
    std::ofstream(p) << content;
    return p.string();
  }
  std::string path(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace loom::test
