// The bad-input catalogue (issue 18): every input a user can get wrong, one row each —
// the command, the exit code (2 invalid input, 3 infeasible or too big for this machine)
// and a fragment the message must contain. Never a crash (139), an internal error (1), a
// hang or a multi-GB allocation. Covers every parser (config, workload CSV, spot traces in
// both formats, throughput tables, the calibrated and the Oobleck profile CSVs, the IR
// text, PyTorch's action CSV) with truncated, binary and empty files, and huge numbers.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_support.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

namespace fs = std::filesystem;

struct Case {
  const char* input;    ///< loom's arguments; {d} is the fixture folder, {s} the source tree
  int exit_code;        ///< 2 or 3
  const char* message;  ///< a fragment of what loom prints
};

// clang-format off
const Case kCatalogue[] = {
    // --- config files ---
    {"sim {d}/missing.toml", 2, "File does not exist"},
    {"config {d}/missing.toml", 2, "cannot open the config file: no such file"},
    {"config {d}", 2, "is a directory, expected the config file"},
    {"config {d}/syntax.toml", 2, "syntax.toml:1"},
    {"config {d}/truncated.toml", 2, "truncated.toml:"},
    {"config {d}/binary.bin", 2, "binary.bin"},
    {"config {d}/empty.toml", 2, "missing [model] section"},
    {"config {s}/configs/examples/uniform-1f1b.toml --set parallel.ppp=2", 2, "unknown key (did you mean 'pp'?) (`loom config CONFIG --dump` lists every key"},
    {"sim {s}/configs/examples/vlm-frozen.toml --set cluster.gpu_memory=2GB --backend evaluator", 3, "try cost.recompute = \"full\""},
    {"config {d}/hiden.toml", 2, "key 'model.modules.llm.hiden': unknown key; did you mean 'hidden'?"},
    {"config {s}/configs/examples/uniform-1f1b.toml --set model.modules.llm.kv_head=8", 2, "unknown key (did you mean 'kv_heads'?)"},
    {"config {s}/configs/examples/uniform-1f1b.toml --set paralel.pp=2", 2, "key 'paralel': unknown section (did you mean 'parallel'?)"},
    {"config {s}/configs/examples/uniform-1f1b.toml --set schedule.zbv.chunks=2", 2, "no scheduler is named 'zbv' (did you mean 'zb-v'?)"},
    {"config {s}/configs/examples/uniform-1f1b.toml --set schedule.looped-bfs.chunk=2", 2, "looped-bfs has no option 'chunk' (did you mean 'chunks'?)"},
    {"config {s}/configs/examples/uniform-1f1b.toml --set schedule.looped-bfs.chunks=0", 2, "key 'schedule.looped-bfs.chunks': expected an integer >= 1, got 0"},
    {"config {s}/configs/examples/uniform-1f1b.toml --set schedule.cornstarch.modality_parallelism=paralel", 2, "(did you mean 'parallel'?)"},
    {"config {s}/configs/examples/uniform-1f1b.toml --set schedule.gpipe.chunks=2", 2, "gpipe takes no options"},
    {"config {s}/validation/megatron-narayanan-2021/n1-1.7b.toml --set cost.fp8=current", 2, "key 'cost.fp8': cluster.gpu 'A100-80GB' has no FP8 tensor cores (FP8 training needs Hopper or Blackwell: H100-SXM, H200, B200, GB200); set cost.fp8 = \"off\""},
    {"config {s}/configs/examples/uniform-1f1b.toml --set cost.fp8=e4m3", 2, "cost.fp8"},
    {"config {s}/validation/megatron-narayanan-2021/n1-145.6b.toml --set 'schedule.stage_layers=[]' --set 'schedule.layout=\"Et*9|(t*10|)*6t*10L\"'", 2, "key 'schedule.layout': counts 79 transformer layers (t) in 8 stages but the model has 80"},
    {"config {s}/validation/megatron-narayanan-2021/n1-145.6b.toml --set 'schedule.layout=\"Et*9|(t*10|)*6t*11L\"'", 2, "key 'schedule.layout': and schedule.stage_layers both split the layers: keep one of them"},
    {"sim {s}/validation/megatron-narayanan-2021/n1-145.6b.toml --set 'schedule.stage_layers=[]' --set 'schedule.layout=\"Et*9|(t*10|)*6t*11L\"' --set schedule.name=interleaved-1f1b --set schedule.interleaved-1f1b.chunks=2 --backend evaluator --out {d}/o", 2, "schedule.layout: 8 stages but the schedule runs 16 (parallel.pp = 8 x 2 chunks per rank)"},
    {"config {s}/configs/examples/vlm-frozen.toml --set 'schedule.layout=\"Et|tL\"'", 2, "splits one language model's layers (Megatron's pipeline layout); this model has"},
    {"config {s}/configs/examples/uniform-1f1b.toml --set parallel.cp=3", 2, "key 'parallel.cp': 3 splits each sequence into 2 x cp = 6 chunks (Megatron's causal balance), but the workload's 1024 tokens per sample do not divide by 6: change workload.tokens or parallel.cp"},
    {"config {s}/configs/examples/uniform-1f1b.toml --set 'parallel.cp_comm=\"p2p\"'", 2, "key 'parallel.cp_comm': applies to context parallelism only: set parallel.cp > 1 or remove the key"},
    {"config {s}/configs/examples/uniform-1f1b.toml --set parallel.cp=2 --set 'parallel.cp_comm=\"ulysses\"'", 2, "parallel.cp_comm"},
    {"config {s}/configs/examples/uniform-1f1b.toml --set parallel.cp=32 --set 'parallel.cp_comm=\"a2a\"'", 2, "key 'parallel.cp_comm': \"a2a\" (Ulysses) splits the attention heads over tp x cp = 32 GPUs"},
    {"sim {s}/configs/examples/vlm-frozen.toml --set parallel.cp=2 --set schedule.name=hetero-colocated --backend evaluator --out {d}/o", 2, "parallel.cp: hetero-colocated gives each module a layout of its own"},
    {"sim {s}/configs/examples/uniform-1f1b.toml --set parallel.cp=2 --set parallel.pp=2 --set cluster.nodes=1 --set parallel.dp=4 --backend evaluator --out {d}/o", 3, "x cp 2 x tp 1 = 16 GPUs, but the cluster has 8"},
    {"config {s}/configs/examples/uniform-1f1b.toml --set cluster.nodes=6 --set 'cluster.fabric.kind=\"fat-tree\"' --set cluster.fabric.nodes_per_leaf=4", 2, "key 'cluster.fabric.nodes_per_leaf': 6 nodes are not whole leaves of 4: set nodes_per_leaf to a divisor of cluster.nodes"},
    {"config {s}/configs/examples/uniform-1f1b.toml --set cluster.nodes=8 --set 'cluster.fabric.kind=\"fat-tree\"' --set cluster.fabric.nodes_per_leaf=2 --set 'cluster.fabric.oversubscription=[1, 7]'", 2, "key 'cluster.fabric.oversubscription': has 2 entries; write one entry (leaf -> spine)"},
    {"config {s}/configs/examples/uniform-1f1b.toml --set 'parallel.order=\"tp-pp-pp-dp\"'", 2, "parallel.order"},
    {"collective {s}/configs/examples/uniform-1f1b.toml --nodes 4", 2, "--nodes: 4 nodes do not fit the cluster's 1"},
    {"collective {s}/configs/examples/uniform-1f1b.toml --size 1XB", 2, "--size: '1XB' is not a size"},
    {"config {s}/configs/examples/uniform-1f1b.toml --set parallel.fsdp_reshard_after_forward=false", 2, "key 'parallel.fsdp_reshard_after_forward': applies to FSDP only: set parallel.fsdp = true or remove the key"},
    {"sim {s}/configs/examples/vlm-frozen.toml --set parallel.fsdp=true --set parallel.dp=2 --set cluster.nodes=2 --set schedule.name=chimera --backend evaluator --out {d}/o", 2, "parallel.fsdp: chimera keeps several copies of a stage in one replica"},
    {"config {s}/configs/examples/uniform-1f1b.toml --set sim.backend=simgird", 2, "key 'sim.backend': unknown simulation backend 'simgird' (did you mean 'simgrid'?)"},
    {"config {s}/configs/examples/uniform-1f1b.toml --set parallel.pp=two", 2, "expected an integer"},
    {"config {s}/configs/examples/uniform-1f1b.toml --set parallel.pp=99999999999", 2, "from 1 to 1000000000"},
    {"config {s}/configs/examples/uniform-1f1b.toml --set cost.efficiency=nan", 2, "cost.efficiency"},
    {"config {s}/configs/examples/vlm-frozen.toml --set workload.tokens.text=0", 2, "0 tokens"},
    {"config {s}/configs/examples/vlm-frozen.toml --set workload.dataset='\"cocoqa\"' --set workload.image_tokens='\"anyres:336/14:4\"'", 2, "key 'workload.image_tokens': 'anyres:336/14:4' takes no tile count; expected \"native\""},
    {"config {s}/configs/examples/vlm-frozen.toml --set workload.packing='\"pack:0\"'", 2, "key 'workload.packing': 'pack:0' is not a packing: give \"none\" or \"pack:N\""},
    {"config {s}/configs/examples/vlm-frozen.toml --set workload.tokens={text=1024}", 2, "workload.tokens.vision': missing"},
    {"config {s}/configs/examples/uniform-1f1b.toml --set schedule.name=nope", 2, "schedule.name"},
    {"config {s}/configs/examples/vlm-frozen.toml --set parallel.tp=3 --set cluster.gpus_per_node=12", 2, "does not divide module 'vision''s 16 attention heads (tensor parallelism splits the heads over its GPUs); use one of 1, 2, 4, 8 (dividing its 16 attention heads, dividing or a multiple of its 16 key/value heads, within a node of 12 GPUs)"},
    {"config {d}/gqa-tp5.toml", 2, "5 neither divides nor is a multiple of module 'llm''s 8 key/value heads; use one of 1, 2, 4, 8 (dividing its 40 attention heads"},
    // --- workload CSV ---
    {"config {s}/configs/examples/vlm-frozen.toml --set workload.csv={d}/text-only.csv", 2, "no column for modality 'vision'"},
    {"config {s}/configs/examples/vlm-frozen.toml --set workload.csv={d}/bad-number.csv", 2, "bad-number.csv:3"},
    {"config {s}/configs/examples/vlm-frozen.toml --set workload.csv={d}/items-sum.csv", 2, "items-sum.csv:3: column 'vision_items': the items sum to 4000 tokens, the sample has 4600"},
    {"config {s}/configs/examples/vlm-frozen.toml --set workload.csv={d}/truncated.csv", 2, "truncated.csv:3: expected 3 columns"},
    {"config {s}/configs/examples/vlm-frozen.toml --set workload.csv={d}/binary.bin", 2, "binary.bin"},
    {"config {s}/configs/examples/vlm-frozen.toml --set workload.csv={d}/empty.csv", 2, "empty.csv:1: empty file"},
    {"config {s}/configs/examples/vlm-frozen.toml --set workload.csv={d}/header-only.csv", 2, "no samples"},
    {"config {s}/configs/examples/vlm-frozen.toml --set workload.csv={d}", 2, "is a directory"},
    {"config {s}/configs/examples/vlm-frozen.toml --set workload.csv={d}/missing.csv", 2, "no such file"},
    // --- spot traces: events and counts ---
    {"trace info {d}", 2, "is a directory, expected the trace file"},
    {"trace info {d}/missing.csv", 2, "no such file"},
    {"trace info {d}/empty.csv", 2, "empty trace"},
    {"trace info {d}/binary.bin", 2, "binary.bin:"},
    {"trace info {d}/events-bad.csv", 2, "events-bad.csv:2"},
    {"trace info {d}/events-truncated.csv", 2, "events-truncated.csv:3"},
    {"trace info {d}/counts-bad.txt", 2, "counts-bad.txt:2"},
    {"trace info {d}/counts-truncated.txt", 2, "counts-truncated.txt:3"},
    {"trace info {s}/traces/spot/ec2-p3.csv --time-scale nan", 2, "--time-scale"},
    // --- throughput tables (CSV and JSON) ---
    {"replay {s}/configs/paper/oobleck-gpt3-1.3b.toml --trace {s}/traces/oobleck/5m.csv --policy oobleck --hours 1 --out {d}/r --throughput-table {d}/tput-bad.csv", 2, "tput-bad.csv"},
    {"replay {s}/configs/paper/oobleck-gpt3-1.3b.toml --trace {s}/traces/oobleck/5m.csv --policy oobleck --hours 1 --out {d}/r --throughput-table {d}/tput-bad.json", 2, "not valid JSON"},
    {"replay {s}/configs/paper/oobleck-gpt3-1.3b.toml --trace {s}/traces/oobleck/5m.csv --policy oobleck --hours 1 --out {d}/r --throughput-table {d}/missing.json", 2, "no such file"},
    {"replay {s}/configs/paper/oobleck-gpt3-1.3b.toml --trace {d} --policy oobleck --hours 1 --out {d}/r", 2, "is a directory"},
    // --- profile CSVs: the calibrated cost model's and Oobleck's per-layer profile ---
    {"config {s}/configs/exec/vlm-host.toml --set cost.model=calibrated --set cost.profile={d}/binary.bin", 2, "binary.bin"},
    {"config {s}/configs/exec/vlm-host.toml --set cost.model=calibrated --set cost.profile={d}/truncated.csv", 2, "truncated.csv"},
    {"config {s}/configs/exec/vlm-host.toml --set cost.model=calibrated --set cost.profile={d}/profile-exponent.csv", 2, "profile-exponent.csv:2: tokens and seconds must be numbers"},
    {"plan templates --profile {d}/binary.bin --nodes 4 --gpus-per-node 1", 2, "binary.bin"},
    {"plan templates --profile {d}/oobleck-truncated.csv --nodes 4 --gpus-per-node 1", 2, "oobleck-truncated.csv:3"},
    {"plan templates --profile {d} --nodes 4 --gpus-per-node 1", 2, "is a directory"},
    // --- schedules: the IR text and PyTorch's action CSV ---
    {"sim {s}/configs/examples/uniform-1f1b.toml --out {d}/o --schedule {d}/ir-truncated.txt", 2, "ir-truncated.txt"},
    {"sim {s}/configs/examples/uniform-1f1b.toml --out {d}/o --schedule {d}/binary.bin", 2, "binary.bin"},
    {"sim {s}/configs/examples/uniform-1f1b.toml --out {d}/o --schedule {d}/pytorch-bad.csv", 2, "pytorch-bad.csv:1"},
    {"sim {s}/configs/examples/uniform-1f1b.toml --out {d}/o --schedule {d}/empty.csv", 2, "empty.csv"},
    {"sim {s}/configs/examples/uniform-1f1b.toml --set parallel.pp=2 --set schedule.microbatches=2 --out {d}/o --schedule {d}/pytorch-deadlock.csv", 2, "before step 0 (1F1, line 2:1)"},
    {"sim {s}/configs/examples/uniform-1f1b.toml --set parallel.pp=2 --set schedule.microbatches=1 --out {d}/o --schedule {d}/dropped-send.loom", 2, "rank 1 op #0 (1RECV_F0:L4<-0): no matching send from rank 0"},
    // --- options ---
    {"exec {s}/configs/exec/vlm-host.toml --out {d}/o --timeout nan", 2, "--timeout: must be a finite number"},
    {"exec {s}/configs/exec/vlm-host.toml --out {d}/o --timeout 0", 2, "from 0.001 to 31536000 s, got '0'"},
    {"sim {s}/configs/examples/uniform-1f1b.toml --out {d}/o --max-memory lots", 2, "--max-memory: expected a size"},
    {"plan layout {s}/configs/examples/uniform-1f1b.toml --confidence nan", 2, "--confidence"},
    {"compare {d} {d} --png {d}/missing/compare.png", 2, "does not exist"},
    {"sweep {s}/studies/vlm-microbatches.toml --out {d}", 2, "--resume to finish it, --force to start over"},
    {"sim {s}/configs/examples/uniform-1f1b.toml --out {d}/mine.txt", 2, "not a folder"},
    // --- resource guards: estimated before anything is built (exit 3, the knob named) ---
    {"plan templates {s}/configs/paper/oobleck-gpt3-1.3b.toml --nodes 100000", 3, "at most 10000 nodes"},
    {"trace generate --kind periodic --nodes 1000000000 --seed 1 --out {d}/t.csv", 3, "use fewer --nodes"},
    {"profile {s}/configs/exec/vlm-host.toml --tokens 1048576 --out {d}/p.csv", 3, "profile fewer --tokens"},
    {"config {s}/configs/examples/uniform-1f1b.toml --set model.modules.llm.layers=1000000000", 3, "--max-memory"},
    {"config {s}/configs/examples/uniform-1f1b.toml --set schedule.microbatches=10000000", 3, "lower schedule.microbatches"},
    {"config {s}/configs/examples/uniform-1f1b.toml --set cluster.nodes=250000 --set parallel.dp=250000", 3, "1000000 rank-stages"},
    {"sim {s}/configs/examples/uniform-1f1b.toml --out {d}/o --max-memory 10KB", 3, "limit (--max-memory)"},
    {"plan templates --profile {d}/oobleck-5000.csv --nodes 4 --gpus-per-node 8 --max-memory 1GB", 3, "stage mapper's memo"},
};
// clang-format on

std::string expand(std::string s, const std::string& dir) {
  for (const auto& [key, value] :
       {std::pair<std::string, std::string>{"{d}", dir}, {"{s}", LOOM_SOURCE_DIR}}) {
    for (size_t at; (at = s.find(key)) != std::string::npos;) s.replace(at, key.size(), value);
  }
  return s;
}

std::string first_bytes(const std::string& path, size_t n) {
  return test::slurp(path).substr(0, n);
}

/// The fixture files the catalogue names.
void write_fixtures(const test::TempDir& d) {
  const std::string src = LOOM_SOURCE_DIR;
  std::string binary;
  for (int i = 0; i < 512; ++i) binary += static_cast<char>((i * 151 + 7) % 256);
  d.write("binary.bin", binary);
  d.write("syntax.toml", "[parallel\npp = 2\n");
  d.write("truncated.toml",
          first_bytes(src + "/configs/examples/vlm-frozen.toml", 400) + "\n[model\n");
  d.write("empty.toml", "");
  d.write("gqa-tp5.toml",
          "[[model.modules]]\nname = \"llm\"\npreset = \"llama3-l\"\n[cluster]\nnodes = "
          "1\ngpus_per_node = 8\n[parallel]\ntp = 5\n");
  d.write("hiden.toml",
          "[[model.modules]]\nname = \"llm\"\nkind = \"llm\"\nlayers = 2\nhiden = 64\n");
  d.write("empty.csv", "");
  d.write("mine.txt", "not a folder\n");
  d.write("text-only.csv", "sample_id,text_tokens\n0,100\n1,100\n");
  d.write("bad-number.csv", "sample_id,text_tokens,vision_tokens\n0,1024,4600\n1,10x,4600\n");
  d.write("items-sum.csv",
          "sample_id,text_tokens,vision_tokens,vision_items\n0,1024,4600,4\n1,10,4600,2000;2000\n");
  d.write("truncated.csv", "sample_id,text_tokens,vision_tokens\n0,1024,4600\n1,10");
  d.write("header-only.csv", "sample_id,text_tokens,vision_tokens\n");
  d.write("profile-exponent.csv", "layer,phase,tokens,tp,seconds\nvision,F,16,1,3e-5000423213\n");
  d.write("events-bad.csv", "0,add,node1\n10,explode,node1\n");
  d.write("events-truncated.csv", "0,add,node1\n0,add,node2\n600000,rem");
  d.write("counts-bad.txt", "2021-12-10, 13:07:45, 80\n2021-12-10, 13:08:45, eighty\n");
  d.write("counts-truncated.txt", "2021-12-10, 13:07:45, 80\n2021-12-10, 13:08:45, 79\n2021-12-1");
  d.write("tput-bad.csv", "nodes,samples_per_s\n4,100\nfive,200\n");
  d.write("tput-bad.json", "{\"4\": 100, \"5\": ");
  d.write("oobleck-truncated.csv",
          "layer,forward_s,backward_s,memory_bytes\n0,0.001,0.002,1000\n1,0.0");
  std::string layers = "layer,forward_s,backward_s,memory_bytes\n";
  for (int l = 0; l < 5000; ++l) layers += std::to_string(l) + ",0.001,0.002,1000\n";
  d.write("oobleck-5000.csv", layers);
  d.write("ir-truncated.txt", "loom-schedule 1\nscheduler 1f1b\nmodules 1 llm\nnum_st");
  d.write("pytorch-bad.csv", "0F0,0Q1\n");
  d.write("pytorch-deadlock.csv", "0F0,0B0,0F1,0B1\n1F1,,1F0,1B0,1B1\n");
  // 1F1B at pp 2, one microbatch, its forward's SEND line deleted.
  d.write("dropped-send.loom",
          "loom-schedule 1\nscheduler 1f1b\nmodules 1 llm\nnum_stages 2\nmicrobatches 1\n"
          "groups 0\nsamples 1\nreplica 0 microbatches 1\nmb 0: 0\nranks 2\n"
          "rank 0 gpu=0 tp=1 replica=0 parameters=0 gradients=0 optimizer=0\n"
          "  0F0 layers=0:4 seconds=0.002 activation=268435456\n"
          "  0RECV_B0:L4<-1 bytes=0\n"
          "  0B0 layers=0:4 seconds=0.004 weight_grad=0.002 release=1\n"
          "rank 1 gpu=1 tp=1 replica=0 parameters=0 gradients=0 optimizer=0\n"
          "  1RECV_F0:L4<-0 bytes=0\n"
          "  1F0 layers=4:8 seconds=0.002 activation=268435456\n"
          "  1B0 layers=4:8 seconds=0.004 weight_grad=0.002 release=1\n"
          "  1SEND_B0:L4->0 bytes=0\nend\n");
}

}  // namespace

TEST(BadInputCatalogue, EveryCaseExitsCleanlyWithItsMessage) {
  const test::TempDir dir;
  write_fixtures(dir);
  const std::string d = dir.path("");
  const std::string folder = d.substr(0, d.size() - 1);  // without the trailing '/'
  for (const Case& c : kCatalogue) {
    const std::string args = expand(c.input, folder);
    const test::CliResult r = test::run_loom(args);
    EXPECT_EQ(r.exit_code, c.exit_code) << "loom " << args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos)
        << "loom " << args << "\nmissing '" << c.message << "' in:\n"
        << r.output;
    EXPECT_EQ(r.output.find("internal error"), std::string::npos) << args << "\n" << r.output;
  }
}

TEST(BadInputCatalogue, PlanLayoutNamesTheCostModelItRatedWith) {
  const test::CliResult r = test::run_loom(
      "plan layout " + test::source_path("configs/examples/uniform-1f1b.toml") + " --sizes 1 4");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("table cost model"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("analytical"), std::string::npos) << r.output;
}

}  // namespace loom
