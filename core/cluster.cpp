#include "core/cluster.hpp"

#include <algorithm>
#include <limits>

#include "core/errors.hpp"

namespace loom {
namespace {

// Vendor datasheets (dense peaks, no sparsity; NVLink total both directions halved to one
// direction):
//   V100 SXM2 32GB: NVIDIA V100 datasheet (2020): 125 TFLOPS fp16 tensor, 15.7 fp32, no TF32,
//     900 GB/s HBM2, 80 SMs, 6 MB L2, NVLink2 300 GB/s.
//   A100 SXM4 40/80GB: NVIDIA A100 datasheet (2021) and Ampere whitepaper: 312 fp16/bf16,
//     156 TF32, 19.5 fp32; 1,555 / 2,039 GB/s; 108 SMs; 40 MB L2; NVLink3 600 GB/s.
//   A40: NVIDIA A40 datasheet: 149.7 fp16, 74.8 TF32, 37.4 fp32; 696 GB/s GDDR6, 48 GB;
//     84 SMs; 6 MB L2; NVLink bridge 112.5 GB/s (pairs); PCIe card: one NIC per node.
//   H100 SXM5: NVIDIA H100 datasheet: 989.4 fp16/bf16, 494.7 TF32, 66.9 fp32; 3,350 GB/s;
//     132 SMs; 50 MB L2; NVLink4 900 GB/s.
//   H200 SXM: NVIDIA H200 product brief: H100's compute; 4,800 GB/s HBM3e, 141 GB.
// Hopper, measured on an H200 (the H100 SXM's die, clocks and 700 W limit) on 2026-12-04
// (bench/gpu/gemm_moe_bench.py, docs/gpu-validation.md): under sustained tensor-core load
// the SM clock falls from its 1,980 MHz boost to 1,245-1,455 MHz (power-limited), so large
// GEMMs sustain 665-679 TFLOP/s in BF16 (cuBLASLt 13.0; squares of 4,096-16,384) and
// 1,136-1,199 in FP8 (tensor-wise scales): tile fractions 0.70 and 0.62, what makes the
// tile model reproduce those squares. Held out, the 36 GEMMs of one Llama 3 8B, 70B and
// 405B layer (their validation configs' TP and 8,192 tokens) then predict within 9 %
// (worst 8.5 %; tests/core/gpu_perf_measured_test.cpp).
// Attention: Transformer Engine prefers its cuDNN FusedAttention to FlashAttention on Hopper
// and later (get_attention_backend in transformer_engine/pytorch/attention/
// dot_product_attention/utils.py: "Select FusedAttention for performance"). cuDNN's causal
// BF16 attention (head dim 128, 8,192 tokens) measured 0.55 forward and 0.48 backward of
// the peak after Loom's wave fill, FA2's 0.31 and 0.29 (below FA3's paper, Shah et al.
// 2024, arXiv 2407.08608: FA2 370 / 322 TFLOP/s on an H100 at its boost clock).
// Memory is what the GPU reports, not the marketed size: an "80 GB" H100 is neither 80e9
// bytes nor 80 GiB but the framebuffer total nvidia-smi (NVML memory.total) prints, in MiB.
// Figures from published nvidia-smi output: H100 80GB HBM3 81559 MiB, A100-SXM4-80GB 81920,
// A100-SXM4-40GB 40960 (the list in modal-labs/modal-client PR #2797, 2025-01, and NCCL
// issue #1264's DGX H100 dump); Tesla V100-SXM2-32GB 32768, NVIDIA A40 46068 (ECC on) and
// NVIDIA H200 143771 (nvidia-smi tables in public repositories' setup notes). What the
// framework can then allocate is this less the CUDA context and NCCL buffers (hundreds of
// MiB); cluster.gpu_memory set to a run's measured free memory holds Loom to that.
constexpr double kMiB = 1024.0 * 1024.0;

constexpr double kHopperGemmFraction = 0.70;
constexpr double kHopperGemmFp8Fraction = 0.62;
constexpr double kHopperCudnnForward = 0.55;
constexpr double kHopperCudnnBackward = 0.48;
constexpr double kHopperFlash2Forward = 0.31;
constexpr double kHopperFlash2Backward = 0.29;

// Hopper's dense FP8 tensor-core peak: NVIDIA H100 datasheet, H100 SXM "FP8 Tensor Core
// 3,958 teraFLOPS" with sparsity, so 1,979 dense (989.4 x 2); the H200 product brief gives
// the H100's compute.
constexpr double kHopperFp8Flops = 2 * 989.4e12;

// Blackwell: NVIDIA Blackwell datasheet 3384703 (Dec 2024), "Individual Blackwell GPU
// Specifications", footnote "All Tensor Core numbers except FP64 with sparsity", so the
// dense peaks here are half its tensor figures:
//   B200 (HGX/DGX B200, 1,000 W): 2.25 PF bf16, 1.1 PF TF32, 4.5 PF FP8, 75 TF fp32; 180 GB
//     HBM3e at 7.7 TB/s; NVLink 5 1.8 TB/s. 148 SMs and 126 MB L2 as the driver reports them
//     (torch device properties on a B200: multi_processor_count=148, L2_cache_size=126MB;
//     Chips and Cheese, "NVIDIA's B200": 74 of 80 SMs enabled per die); 183,359 MiB in
//     nvidia-smi (modal-labs/gpu-glossary's nvidia-smi page). DGX B200: 8 ConnectX-7
//     400 Gb/s NICs, one per GPU (DGX B200 User Guide).
//   GB200 (GB200 NVL72, 1,200 W): 2.5 PF bf16, 1.25 PF TF32, 5 PF FP8, 80 TF fp32; 186 GB at
//     8 TB/s; NVLink 5 1.8 TB/s in a 72-GPU domain; 189,471 MiB in nvidia-smi; 152 SMs as
//     users' device queries report (NVIDIA publishes no count); L2 taken as the B200's 126 MB
//     (the same die; unconfirmed). One ConnectX-7 400G per GPU (DGX GB200 User Guide).
// Fused attention on Blackwell is cuDNN's (what Transformer Engine runs there): its BF16
// forward on B200 is FlashAttention-4's 1,613 TFLOP/s over the "up to 1.3x over cuDNN 9.13"
// of FA4's abstract (Zadouri, Dao et al. 2025), 1,241 of 2,250: 0.55. No backward figure is
// published: Hopper FA2's backward/forward ratio (322/370) gives 0.48, an assumption.
constexpr double kBlackwellFlashForward = 1613.0 / 1.3 / 2250.0;
constexpr double kBlackwellFlashBackward = kBlackwellFlashForward * 322.0 / 370.0;
// GEMMs on Blackwell (sm_100): OpenXLA's measured GEMM table (xla/backends/gpu/cost_model/
// matmul_interpolator_data.h, kDefaultMatmulPTable, key "sm_100"; as vendored in
// tensorflow/tensorflow at a305421c) gives BF16 squares of 2,048 and 4,096 at 985.8 and
// 1,416.9 TFLOP/s: tile fractions 0.658 and 0.665, what makes the tile model reproduce
// them; its FP8 4,096 square (2,765 TFLOP/s of 4,500) gives 0.68, so FP8 takes the BF16
// fraction (its FP8 column is not used beyond that: its sm_90 FP8 figures exceed the
// H100's dense peak). The same table's sm_90 BF16 squares give 0.79-0.83 where the H200
// measured 0.70 sustained: XLA's are short-run figures, so Blackwell's sustained speed
// may be lower still. The table does not say whether its sm_100 was a B200 or a GB200:
// both presets take it.
constexpr double kBlackwellGemmFraction = 0.66;

GpuSpec blackwell(GpuSpec spec, double fp8) {
  spec.flash_forward_fraction = kBlackwellFlashForward;
  spec.flash_backward_fraction = kBlackwellFlashBackward;
  spec.flash2_forward_fraction = 0;  // no published FlashAttention-2 figure
  spec.flash2_backward_fraction = 0;
  spec.gemm_fraction = kBlackwellGemmFraction;
  spec.peak_fp8_flops = fp8;
  return spec;
}

GpuSpec hopper(GpuSpec spec) {
  spec.flash_forward_fraction = kHopperCudnnForward;
  spec.flash_backward_fraction = kHopperCudnnBackward;
  spec.flash2_forward_fraction = kHopperFlash2Forward;
  spec.flash2_backward_fraction = kHopperFlash2Backward;
  spec.gemm_fraction = kHopperGemmFraction;
  spec.gemm_fp8_fraction = kHopperGemmFp8Fraction;
  spec.peak_fp8_flops = kHopperFp8Flops;
  return spec;
}

GpuSpec gpu(const char* name, double fp16, double tf32, double fp32, double bandwidth,
            double memory, int sms, double l2, double nvlink_total, bool nic_per_gpu) {
  return GpuSpec{.name = name,
                 .peak_flops = fp16,
                 .hbm_bandwidth = bandwidth,
                 .memory_bytes = memory,
                 .peak_tf32_flops = tf32,
                 .peak_fp32_flops = fp32,
                 .sms = sms,
                 .l2_bytes = l2,
                 .nvlink_bandwidth = nvlink_total / 2,
                 .nic_per_gpu = nic_per_gpu};
}

const std::vector<GpuSpec>& presets() {
  static const std::vector<GpuSpec> kPresets = {
      gpu("V100-32GB", 125e12, 0, 15.7e12, 900e9, 32768 * kMiB, 80, 6e6, 300e9, false),
      gpu("A100-40GB", 312e12, 156e12, 19.5e12, 1555e9, 40960 * kMiB, 108, 40e6, 600e9, true),
      gpu("A100-80GB", 312e12, 156e12, 19.5e12, 2039e9, 81920 * kMiB, 108, 40e6, 600e9, true),
      gpu("A40", 149.7e12, 74.8e12, 37.4e12, 696e9, 46068 * kMiB, 84, 6e6, 112.5e9, false),
      hopper(gpu("H100-SXM", 989.4e12, 494.7e12, 66.9e12, 3350e9, 81559 * kMiB, 132, 50e6, 900e9,
                 true)),
      hopper(
          gpu("H200", 989.4e12, 494.7e12, 66.9e12, 4800e9, 143771 * kMiB, 132, 50e6, 900e9, true)),
      blackwell(
          gpu("B200", 2250e12, 1100e12, 75e12, 7700e9, 183359 * kMiB, 148, 126e6, 1800e9, true),
          4500e12),
      blackwell(
          gpu("GB200", 2500e12, 1250e12, 80e12, 8000e9, 189471 * kMiB, 152, 126e6, 1800e9, true),
          5000e12),
  };
  return kPresets;
}

// Short names kept where they name one preset; "A100" does not (40 or 80 GB).
const char* alias_of(const std::string& name) {
  if (name == "H100") return "H100-SXM";
  return nullptr;
}

}  // namespace

double GpuSpec::peak_for_dtype(int dtype_bytes) const {
  if (dtype_bytes == 1) {
    if (peak_fp8_flops > 0) return peak_fp8_flops;
    throw InputError("cost.fp8: cluster.gpu '" + name +
                     "' has no FP8 tensor cores (FP8 training needs Hopper or Blackwell: " +
                     "H100-SXM, H200, B200, GB200); set cost.fp8 = \"off\" or pick such a GPU");
  }
  const double peak = dtype_bytes <= 2 ? peak_flops : peak_tf32_flops;
  if (peak > 0) return peak;
  throw InputError("cluster.gpu: preset '" + name + "' has no tensor-core peak for " +
                   std::to_string(dtype_bytes) + "-byte elements (" +
                   (dtype_bytes <= 2 ? "fp16/bf16" : "TF32") +
                   "); set cluster.peak_flops or use a 2-byte dtype");
}

GpuSpec gpu_preset(const std::string& name) {
  const char* alias = alias_of(name);
  const std::string resolved = alias ? alias : name;
  for (const GpuSpec& spec : presets()) {
    if (spec.name == resolved) return spec;
  }
  std::string valid;
  for (const std::string& n : gpu_preset_names()) valid += (valid.empty() ? "" : ", ") + n;
  if (name == "A100")
    throw InputError("GPU preset 'A100' is ambiguous: say A100-40GB or A100-80GB");
  throw InputError("unknown GPU preset '" + name + "' (valid: " + valid + ")");
}

std::vector<std::string> gpu_preset_names() {
  std::vector<std::string> names;
  for (const GpuSpec& spec : presets()) names.push_back(spec.name);
  return names;
}

const char* to_string(FabricKind kind) {
  switch (kind) {
    case FabricKind::kStar:
      return "star";
    case FabricKind::kFatTree:
      return "fat-tree";
    case FabricKind::kRailOptimized:
      return "rail-optimized";
  }
  return "?";
}

const char* to_string(LinkTier tier) {
  switch (tier) {
    case LinkTier::kGpu:
      return "gpu";
    case LinkTier::kNic:
      return "nic";
    case LinkTier::kLeafUplink:
      return "leaf-uplink";
    case LinkTier::kPodUplink:
      return "pod-uplink";
  }
  return "?";
}

bool Fabric::non_blocking() const {
  return std::ranges::all_of(oversubscription, [](double k) { return k <= 1; }) &&
         std::ranges::all_of(tier_latency, [](double l) { return l == 0; });
}

int Cluster::num_leaves() const {
  return fabric.tiers() == 0 ? nodes : nodes / fabric.nodes_per_leaf;
}
int Cluster::num_pods() const {
  return fabric.tiers() < 2 ? 1 : num_leaves() / fabric.leaves_per_pod;
}
int Cluster::leaf_of_node(int node) const {
  return fabric.tiers() == 0 ? node : node / fabric.nodes_per_leaf;
}
int Cluster::pod_of_leaf(int leaf) const {
  return fabric.tiers() < 2 ? 0 : leaf / fabric.leaves_per_pod;
}
int Cluster::tier_crossed(int src_node, int dst_node) const {
  if (fabric.tiers() == 0) return 0;
  const int a = leaf_of_node(src_node), b = leaf_of_node(dst_node);
  if (a == b) return 0;
  return pod_of_leaf(a) == pod_of_leaf(b) ? 1 : 2;
}

namespace {

/// Index of the first leaf trunk, and of the first pod trunk, in network_links().
int first_leaf_link(const Cluster& c) {
  return c.num_gpus() + c.nodes;
}
int first_pod_link(const Cluster& c) {
  return first_leaf_link(c) + (c.fabric.tiers() >= 1 ? c.num_leaves() : 0);
}
int link_count(const Cluster& c) {
  return first_pod_link(c) + (c.fabric.tiers() == 2 ? c.num_pods() : 0);
}

// Links a TP group's GPUs share offer each copy of a rank's flow its share
// (Cluster::flow_copies): the functions below give that share.

/// A node's NICs (rails) as one uplink of their summed bandwidth; flow_rate_cap() holds
/// each rank's flow to what its GPUs' rails can carry.
double node_uplink_bandwidth(const Cluster& c) {
  return c.nics_per_node * c.inter_node.bandwidth / std::max(1, c.flow_copies);
}
/// A tier's trunk: the bandwidth of the group's downlinks over the tier's oversubscription.
double leaf_trunk_bandwidth(const Cluster& c) {
  return c.fabric.nodes_per_leaf * node_uplink_bandwidth(c) / c.fabric.oversubscription[0];
}
double pod_trunk_bandwidth(const Cluster& c) {
  return c.fabric.leaves_per_pod * leaf_trunk_bandwidth(c) / c.fabric.oversubscription[1];
}
double tier_link_latency(const Cluster& c, int tier) {
  return c.fabric.tier_latency.empty() ? 0.0 : c.fabric.tier_latency[tier] / 2;
}

}  // namespace

int leaf_uplink_index(const Cluster& cluster, int leaf) {
  return first_leaf_link(cluster) + leaf;
}
int pod_uplink_index(const Cluster& cluster, int pod) {
  return first_pod_link(cluster) + pod;
}

NetworkLink network_link(const Cluster& cluster, int index) {
  if (index < cluster.num_gpus()) {
    return {"gpu-" + std::to_string(index), LinkTier::kGpu, cluster.intra_node.bandwidth,
            cluster.intra_node.latency / 2};
  }
  if (index < first_leaf_link(cluster)) {
    return {"nic-" + std::to_string(index - cluster.num_gpus()), LinkTier::kNic,
            node_uplink_bandwidth(cluster), cluster.inter_node.latency / 2};
  }
  if (index < first_pod_link(cluster)) {
    return {"leaf-" + std::to_string(index - first_leaf_link(cluster)) + "-up",
            LinkTier::kLeafUplink, leaf_trunk_bandwidth(cluster), tier_link_latency(cluster, 0)};
  }
  return {"pod-" + std::to_string(index - first_pod_link(cluster)) + "-up", LinkTier::kPodUplink,
          pod_trunk_bandwidth(cluster), tier_link_latency(cluster, 1)};
}

std::vector<NetworkLink> network_links(const Cluster& cluster) {
  // GPU links, one NIC uplink per node, then the trunks (network_link's numbering).
  const int count = link_count(cluster);
  std::vector<NetworkLink> links;
  links.reserve(static_cast<size_t>(std::max(count, 0)));
  for (int i = 0; i < count; ++i) links.push_back(network_link(cluster, i));
  return links;
}

std::vector<Hop> route(const Cluster& cluster, int src_gpu, int dst_gpu) {
  if (src_gpu == dst_gpu) return {};
  const int src_node = cluster.node_of(src_gpu);
  const int dst_node = cluster.node_of(dst_gpu);
  if (src_node == dst_node) return {{src_gpu, true}, {dst_gpu, false}};
  const int nic_base = cluster.num_gpus();
  std::vector<Hop> hops = {{src_gpu, true}, {nic_base + src_node, true}};
  const int crossed = cluster.tier_crossed(src_node, dst_node);
  const int src_leaf = cluster.leaf_of_node(src_node), dst_leaf = cluster.leaf_of_node(dst_node);
  if (crossed >= 1) hops.push_back({leaf_uplink_index(cluster, src_leaf), true});
  if (crossed == 2) {
    hops.push_back({pod_uplink_index(cluster, cluster.pod_of_leaf(src_leaf)), true});
    hops.push_back({pod_uplink_index(cluster, cluster.pod_of_leaf(dst_leaf)), false});
  }
  if (crossed >= 1) hops.push_back({leaf_uplink_index(cluster, dst_leaf), false});
  hops.push_back({nic_base + dst_node, false});
  hops.push_back({dst_gpu, false});
  return hops;
}

double flow_rate_cap(const Cluster& cluster, int src_gpu, int dst_gpu, int tp) {
  if (cluster.node_of(src_gpu) == cluster.node_of(dst_gpu)) return 0;
  return cluster.inter_node_flow_cap(tp);
}

double transfer_time(const Cluster& cluster, int src_gpu, int dst_gpu, double bytes, int tp) {
  if (src_gpu == dst_gpu) return 0.0;
  const bool same_node = cluster.node_of(src_gpu) == cluster.node_of(dst_gpu);
  double latency = cluster.intra_node.latency;
  double bandwidth = cluster.intra_node.bandwidth;
  if (!same_node) {
    latency += cluster.inter_node.latency;
    bandwidth = std::min(bandwidth, cluster.inter_node_flow_cap(tp));
    const int crossed = cluster.tier_crossed(cluster.node_of(src_gpu), cluster.node_of(dst_gpu));
    for (int tier = 0; tier < crossed; ++tier) latency += 2 * tier_link_latency(cluster, tier);
    if (crossed >= 1) bandwidth = std::min(bandwidth, leaf_trunk_bandwidth(cluster));
    if (crossed == 2) bandwidth = std::min(bandwidth, pod_trunk_bandwidth(cluster));
  }
  if (bytes <= 0) return latency;
  return latency + bytes / bandwidth;
}

}  // namespace loom
