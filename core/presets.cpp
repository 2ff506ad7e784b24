#include "core/presets.hpp"

namespace loom {
namespace {

LayerSpec transformer(int hidden, int ffn, int heads, int kv_heads, bool gated, bool causal) {
  LayerSpec l;
  l.kind = LayerKind::kTransformer;
  l.hidden = hidden;
  l.ffn = ffn;
  l.heads = heads;
  l.kv_heads = kv_heads;
  l.gated_mlp = gated;
  l.causal = causal;
  l.out_hidden = hidden;
  return l;
}

const std::vector<ModulePreset>& presets() {
  // Dissertation Table 3.1 "Modality (LLM, vision, and audio) configurations":
  // layers / hidden / # params. Llama-3: S 16/2048/1b, M 32/4096/8b, L 64/5120/32b.
  // Qwen2 Vision: S 32/1280/0.6b, M 48/2560/3.9b, L 64/3840/11.6b.
  // Phi4 Audio: S 24/1024/0.5b, M 32/3072/3.4b, L 48/5120/12.4b.
  static const std::vector<ModulePreset> kPresets = {
      {"llama3-s", ModuleKind::kLlm, "text", 16, transformer(2048, 8192, 32, 8, true, true), 1e9},
      {"llama3-m", ModuleKind::kLlm, "text", 32, transformer(4096, 14336, 32, 8, true, true), 8e9},
      {"llama3-l", ModuleKind::kLlm, "text", 64, transformer(5120, 27648, 40, 8, true, true), 32e9},
      {"qwen2-vision-s", ModuleKind::kEncoder, "vision", 32,
       transformer(1280, 5120, 16, 16, false, false), 0.6e9},
      {"qwen2-vision-m", ModuleKind::kEncoder, "vision", 48,
       transformer(2560, 10240, 40, 40, false, false), 3.9e9},
      {"qwen2-vision-l", ModuleKind::kEncoder, "vision", 64,
       transformer(3840, 15360, 60, 60, false, false), 11.6e9},
      {"phi4-audio-s", ModuleKind::kEncoder, "audio", 24,
       transformer(1024, 4096, 16, 16, false, false), 0.5e9},
      {"phi4-audio-m", ModuleKind::kEncoder, "audio", 32,
       transformer(3072, 12288, 48, 48, false, false), 3.4e9},
      {"phi4-audio-l", ModuleKind::kEncoder, "audio", 48,
       transformer(5120, 20480, 80, 80, false, false), 12.4e9},
  };
  return kPresets;
}

struct NamedLink {
  const char* name;
  LinkSpec link;
};

// Per-direction bandwidths from the vendors' specifications; latencies are typical
// one-way figures (a few microseconds), not measurements.
const std::vector<NamedLink>& links() {
  static const std::vector<NamedLink> kLinks = {
      {"nvlink3", {300e9, 2e-6}},       // A100: 600 GB/s bidirectional
      {"nvlink4", {450e9, 2e-6}},       // H100/H200: 900 GB/s bidirectional
      {"nvlink-a40", {56.25e9, 2e-6}},  // A40 NVLink bridge: 112.5 GB/s bidirectional
      {"pcie4", {32e9, 3e-6}},          // PCIe 4.0 x16
      {"ib-hdr", {25e9, 5e-6}},         // 200 Gb/s InfiniBand HDR
      {"ib-ndr", {50e9, 5e-6}},         // 400 Gb/s InfiniBand NDR
      // Blackwell: NVLink 5, 1.8 TB/s per GPU both directions (Blackwell datasheet); XDR
      // InfiniBand, 800 Gb/s per ConnectX-8 port (its firmware release notes). NVIDIA
      // publishes no XDR latency: NDR's is kept.
      {"nvlink5", {900e9, 2e-6}},
      {"ib-xdr", {100e9, 5e-6}},
  };
  return kLinks;
}

}  // namespace

std::optional<ModulePreset> module_preset(const std::string& name) {
  for (const ModulePreset& p : presets()) {
    if (p.name == name) return p;
  }
  return std::nullopt;
}

std::vector<std::string> module_preset_names() {
  std::vector<std::string> names;
  for (const ModulePreset& p : presets()) names.push_back(p.name);
  return names;
}

std::optional<LinkSpec> link_preset(const std::string& name) {
  for (const NamedLink& l : links()) {
    if (name == l.name) return l.link;
  }
  return std::nullopt;
}

std::vector<std::string> link_preset_names() {
  std::vector<std::string> names;
  for (const NamedLink& l : links()) names.push_back(l.name);
  return names;
}

}  // namespace loom
