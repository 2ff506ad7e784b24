#pragma once
/// Cluster description: nodes of identical GPUs, an intra-node fabric (NVLink or PCIe) and
/// an inter-node fabric (InfiniBand), plus the route model shared by the contention-free
/// evaluator and the SimGrid platform so the two agree exactly when links are free.
///
/// Topology (every link is split-duplex: the two directions do not share bandwidth):
///
///     gpu0 --[gpu-0]--+                       +--[gpu-4]-- gpu4
///     gpu1 --[gpu-1]--+-- node0 --[nic-0]== IB ==[nic-1]-- node1 --+--[gpu-5]-- gpu5
///     ...                                                           ...
///
/// A GPU link carries half the intra-node latency, a NIC link half the inter-node latency:
///   intra-node route: gpu-a(up), gpu-b(down)                -> latency = intra.latency
///   inter-node route: gpu-a(up), nic-x(up), nic-y(down), gpu-b(down)
///                                                           -> latency = intra + inter
/// and the bandwidth of a route is the minimum over its links.
#include <algorithm>
#include <string>
#include <vector>

namespace loom {

/// One GPU model, from its vendor's datasheet (sources in core/cluster.cpp). Peaks are
/// dense (no sparsity); 0 means the datasheet gives no such peak.
struct GpuSpec {
  std::string name;
  double peak_flops = 0;       ///< dense fp16/bf16 tensor-core FLOP/s
  double hbm_bandwidth = 0;    ///< device memory bandwidth, bytes/s
  double memory_bytes = 0;     ///< device memory
  double peak_tf32_flops = 0;  ///< dense TF32 tensor-core FLOP/s (what fp32 training uses)
  double peak_fp32_flops = 0;  ///< fp32 without tensor cores
  double peak_fp8_flops = 0;   ///< dense FP8 tensor-core FLOP/s (0: no FP8 tensor cores)
  int sms = 0;                 ///< streaming multiprocessors (GEMM wave quantization)
  double l2_bytes = 0;
  double nvlink_bandwidth = 0;  ///< per direction, bytes/s (0: no NVLink)
  /// NICs of the usual server for this part: one per GPU in DGX/HGX boxes (SXM parts),
  /// 0 = one per node (PCIe parts). The default of `cluster.nics_per_node`.
  bool nic_per_gpu = false;
  /// Fractions of `peak_flops` FlashAttention-2 reaches on this part, forward and backward
  /// (GpuPerformance::flash_attention_seconds). The defaults are its own paper's A100
  /// figures (Dao 2023, §4.1: up to 73 % forward, 63 % backward); Hopper presets carry
  /// their own (core/cluster.cpp): FA2 does not use Hopper's asynchronous tensor cores.
  double flash_forward_fraction = 0.73;
  double flash_backward_fraction = 0.63;

  /// Tensor-core peak for a dtype of `dtype_bytes` (1: FP8, 2: fp16/bf16, 4: TF32). Throws
  /// InputError naming `cluster.gpu` when the preset has no such peak.
  double peak_for_dtype(int dtype_bytes) const;
};

/// Known GPU presets: "V100-32GB", "A100-40GB", "A100-80GB", "A40", "H100-SXM", "H200",
/// "B200", "GB200" (a GB200 NVL72's 72-GPU NVLink domain is `gpus_per_node = 72`);
/// "H100" is an alias of "H100-SXM". Throws InputError on an unknown or ambiguous name
/// ("A100": 40 or 80 GB?), listing the valid ones.
GpuSpec gpu_preset(const std::string& name);
std::vector<std::string> gpu_preset_names();

struct LinkSpec {
  double bandwidth = 0;  ///< bytes/s, per direction
  double latency = 0;    ///< seconds, end to end for the fabric
};

struct Cluster {
  int nodes = 1;
  int gpus_per_node = 1;
  GpuSpec gpu;
  LinkSpec intra_node;
  LinkSpec inter_node;  ///< one NIC (rail)
  /// NICs (rails) per node; the node's uplink carries nics x inter_node.bandwidth.
  int nics_per_node = 1;

  int num_gpus() const { return nodes * gpus_per_node; }
  int node_of(int gpu_index) const { return gpu_index / gpus_per_node; }
  /// Fastest rate of one rank's inter-node flow, for a rank of `tp` GPUs. A rank's flow
  /// stands for the tp flows of its GPUs, each carrying its shard: one GPU reaches at most
  /// one NIC's bandwidth (its own rail in a DGX, the shared NIC elsewhere), and the tp
  /// flows together at most the node's NICs: min(bw, nics x bw / tp).
  double inter_node_flow_cap(int tp) const {
    const double nic = inter_node.bandwidth;
    return std::min(nic, nics_per_node * nic / std::max(tp, 1));
  }
};

/// One direction of one link on a route.
struct Hop {
  int link = 0;    ///< index into network_links()
  bool up = true;  ///< direction: up = towards the fabric, down = away from it
};

struct NetworkLink {
  std::string name;  ///< "gpu-3", "nic-1"
  double bandwidth = 0;
  double latency = 0;
};

/// All links of the platform: first one per GPU, then one per node's NIC.
std::vector<NetworkLink> network_links(const Cluster& cluster);
/// network_links(cluster)[index], without building the others.
NetworkLink network_link(const Cluster& cluster, int index);
/// The hops from one GPU to another (empty when src == dst).
std::vector<Hop> route(const Cluster& cluster, int src_gpu, int dst_gpu);
/// Time to move `bytes` from src to dst with nothing else on the route:
/// sum of latencies + bytes / min bandwidth (what SimGrid's CM02 model computes), the
/// bandwidth of an inter-node route held to inter_node_flow_cap(tp) for ranks of `tp` GPUs.
double transfer_time(const Cluster& cluster, int src_gpu, int dst_gpu, double bytes, int tp = 1);
/// The rate cap of a flow between two ranks (0: none, an intra-node route).
double flow_rate_cap(const Cluster& cluster, int src_gpu, int dst_gpu, int tp);

}  // namespace loom
