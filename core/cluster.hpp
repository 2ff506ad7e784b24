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
#include <string>
#include <vector>

namespace loom {

struct GpuSpec {
  std::string name;
  double peak_flops = 0;     ///< dense bf16 FLOP/s (tensor cores, no sparsity)
  double hbm_bandwidth = 0;  ///< bytes/s
  double memory_bytes = 0;   ///< device memory
};

/// Known GPU presets: "A40", "A100", "H100", "H200". Throws InputError on an unknown name,
/// listing the valid ones.
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
  LinkSpec inter_node;

  int num_gpus() const { return nodes * gpus_per_node; }
  int node_of(int gpu_index) const { return gpu_index / gpus_per_node; }
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
/// sum of latencies + bytes / min bandwidth (what SimGrid's CM02 model computes).
double transfer_time(const Cluster& cluster, int src_gpu, int dst_gpu, double bytes);

}  // namespace loom
