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
/// and the bandwidth of a route is the minimum over its links. On a tiered fabric
/// (`Fabric` below) a route between leaves also climbs the source leaf's trunk and comes
/// down the destination's (and the two pods' trunks across pods), each adding its tier's
/// latency. Links the GPUs of a rank's TP group share (NICs, trunks) offer each of the
/// group's flow copies its share (`Cluster::flow_copies`).
#include <algorithm>
#include <cstdint>
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
  /// Fractions of `peak_flops` the fused attention kernel Transformer Engine runs on this
  /// part reaches, forward and backward (GpuPerformance::flash_attention_seconds;
  /// `cost.attention = "flash"`). The defaults are FlashAttention-2's own paper's A100
  /// figures (Dao 2023, §4.1: up to 73 % forward, 63 % backward); Hopper and Blackwell
  /// presets carry cuDNN's fused attention (core/cluster.cpp).
  double flash_forward_fraction = 0.73;
  double flash_backward_fraction = 0.63;
  /// FlashAttention-2's own fractions (`cost.attention = "flash2"`, e.g. PyTorch SDPA's
  /// default flash backend); 0: no figure for this part.
  double flash2_forward_fraction = 0.73;
  double flash2_backward_fraction = 0.63;
  /// Fraction of the tensor-core peak one large GEMM tile sustains (GpuPerformance's tile
  /// model, before wave and tile quantization), BF16/FP16 and FP8 (0: the BF16 one). The
  /// default is the A100 guide's midpoint; Hopper presets carry a measured one
  /// (core/gpu_perf.cpp, core/cluster.cpp).
  double gemm_fraction = 0.80;
  double gemm_fp8_fraction = 0;

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

/// The switch fabric above the nodes (`[cluster.fabric]`, docs/fabrics.md).
///
///   star            every node's uplink meets one non-blocking switch (the default)
///   fat-tree        nodes under leaf switches, leaves under spines (2 tiers), or leaves
///                   grouped into pods whose spines meet a core tier (3 tiers)
///   rail-optimized  the same tree, its first tier one leaf per rail: NIC k of every node of
///                   a leaf group (a DGX SuperPOD scalable unit) on the rail-k leaf
///
/// Every tier above the leaf is one trunk per switch group, its bandwidth the group's
/// downlinks over the tier's oversubscription: ECMP is modelled as ideal spreading of flows
/// over a group's equal-cost uplinks (no hash collisions), so the uplinks of one group act
/// as one link of their summed bandwidth. Under rail-optimized, NCCL's PXN (on by default
/// since NCCL 2.12) first moves a message over NVLink to the GPU on the destination's
/// rail, so traffic between two nodes of one group stays inside the group's leaves.
enum class FabricKind : std::uint8_t { kStar, kFatTree, kRailOptimized };
const char* to_string(FabricKind kind);  ///< "star", "fat-tree", "rail-optimized"

struct Fabric {
  FabricKind kind = FabricKind::kStar;
  int nodes_per_leaf = 1;  ///< nodes under one leaf (rail-optimized: one rail group)
  int leaves_per_pod = 0;  ///< 0: two tiers, every leaf under one spine tier
  /// Downlink over uplink bandwidth of each tier above the leaf, lowest first: one entry
  /// (leaf -> spine) for two tiers, two (leaf -> spine, spine -> core) for three.
  std::vector<double> oversubscription;
  /// Latency each tier adds to a route that crosses it (two more switch hops), seconds;
  /// 0 by default: `cluster.inter_node.latency` stands for the whole fabric.
  std::vector<double> tier_latency;

  /// Switch tiers above the leaf: 0 (star), 1 or 2.
  int tiers() const { return static_cast<int>(oversubscription.size()); }
  /// Every tier carries what its downlinks can and adds no latency: timings are the star's.
  bool non_blocking() const;
};

struct Cluster {
  int nodes = 1;
  int gpus_per_node = 1;
  GpuSpec gpu;
  LinkSpec intra_node;
  LinkSpec inter_node;  ///< one NIC (rail)
  /// NICs (rails) per node; the node's uplink carries nics x inter_node.bandwidth.
  int nics_per_node = 1;
  Fabric fabric;
  /// GPU flows one rank's flow stands for: a rank is a TP group whose tp GPUs each move
  /// their own shard at once, so a link the group's GPUs share (a node's NIC uplink, a
  /// fabric trunk) carries tp copies of every flow of the rank, and offers each copy
  /// 1/tp of its bandwidth. The study sets it to parallel.tp (1 with per-module layouts,
  /// whose ranks differ in tp; docs/fabrics.md). A GPU's own link carries one copy.
  int flow_copies = 1;

  int num_gpus() const { return nodes * gpus_per_node; }
  int node_of(int gpu_index) const { return gpu_index / gpus_per_node; }
  /// Leaves and pods of the fabric (1 pod with two tiers; nodes leaves on a star).
  int num_leaves() const;
  int num_pods() const;
  int leaf_of_node(int node) const;
  int pod_of_leaf(int leaf) const;
  /// The highest tier a route between two nodes climbs: 0 within one leaf (or on a star),
  /// 1 through the spines, 2 through the core.
  int tier_crossed(int src_node, int dst_node) const;
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

/// Which level of the platform a link belongs to (metrics' per-tier utilisation).
enum class LinkTier : std::uint8_t { kGpu, kNic, kLeafUplink, kPodUplink };
const char* to_string(LinkTier tier);  ///< "gpu", "nic", "leaf-uplink", "pod-uplink"

struct NetworkLink {
  std::string name;  ///< "gpu-3", "nic-1", "leaf-0-up", "pod-1-up"
  LinkTier tier = LinkTier::kGpu;
  double bandwidth = 0;
  double latency = 0;
};

/// All links of the platform: first one per GPU, then one per node's NIC, then one trunk
/// per leaf (its spine uplinks) and one per pod (its core uplinks) on a tiered fabric.
std::vector<NetworkLink> network_links(const Cluster& cluster);
/// Indices in network_links() of a leaf's spine trunk and a pod's core trunk.
int leaf_uplink_index(const Cluster& cluster, int leaf);
int pod_uplink_index(const Cluster& cluster, int pod);
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
