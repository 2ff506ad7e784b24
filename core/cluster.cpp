#include "core/cluster.hpp"

#include <algorithm>
#include <limits>

#include "core/errors.hpp"

namespace loom {
namespace {

// Dense bf16 tensor-core peak without sparsity, memory bandwidth and capacity, from the
// vendors' datasheets: A40 (PCIe, GDDR6), A100 SXM4 80GB, H100 SXM5, H200 SXM.
const std::vector<GpuSpec>& presets() {
  static const std::vector<GpuSpec> kPresets = {
      {"A40", 149.7e12, 696e9, 48e9},
      {"A100", 312e12, 2039e9, 80e9},
      {"H100", 989.4e12, 3350e9, 80e9},
      {"H200", 989.4e12, 4800e9, 141e9},
  };
  return kPresets;
}

}  // namespace

GpuSpec gpu_preset(const std::string& name) {
  for (const GpuSpec& spec : presets()) {
    if (spec.name == name) return spec;
  }
  std::string valid;
  for (const std::string& n : gpu_preset_names()) valid += (valid.empty() ? "" : ", ") + n;
  throw InputError("unknown GPU preset '" + name + "' (valid: " + valid + ")");
}

std::vector<std::string> gpu_preset_names() {
  std::vector<std::string> names;
  for (const GpuSpec& spec : presets()) names.push_back(spec.name);
  return names;
}

NetworkLink network_link(const Cluster& cluster, int index) {
  if (index < cluster.num_gpus()) {
    return {"gpu-" + std::to_string(index), cluster.intra_node.bandwidth,
            cluster.intra_node.latency / 2};
  }
  return {"nic-" + std::to_string(index - cluster.num_gpus()), cluster.inter_node.bandwidth,
          cluster.inter_node.latency / 2};
}

std::vector<NetworkLink> network_links(const Cluster& cluster) {
  std::vector<NetworkLink> links;
  links.reserve(static_cast<size_t>(cluster.num_gpus() + cluster.nodes));
  for (int i = 0; i < cluster.num_gpus() + cluster.nodes; ++i)
    links.push_back(network_link(cluster, i));
  return links;
}

std::vector<Hop> route(const Cluster& cluster, int src_gpu, int dst_gpu) {
  if (src_gpu == dst_gpu) return {};
  const int src_node = cluster.node_of(src_gpu);
  const int dst_node = cluster.node_of(dst_gpu);
  if (src_node == dst_node) return {{src_gpu, true}, {dst_gpu, false}};
  const int nic_base = cluster.num_gpus();
  return {
      {src_gpu, true}, {nic_base + src_node, true}, {nic_base + dst_node, false}, {dst_gpu, false}};
}

double transfer_time(const Cluster& cluster, int src_gpu, int dst_gpu, double bytes) {
  if (src_gpu == dst_gpu) return 0.0;
  const bool same_node = cluster.node_of(src_gpu) == cluster.node_of(dst_gpu);
  double latency = cluster.intra_node.latency;
  double bandwidth = cluster.intra_node.bandwidth;
  if (!same_node) {
    latency += cluster.inter_node.latency;
    bandwidth = std::min(bandwidth, cluster.inter_node.bandwidth);
  }
  if (bytes <= 0) return latency;
  return latency + bytes / bandwidth;
}

}  // namespace loom
