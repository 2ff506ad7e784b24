#pragma once
/// Model and link presets. Module sizes are those of dissertation Table 3.1 (layers,
/// hidden size, parameter count); the FFN widths and head counts the table does not give
/// come from the public model cards of the families it names (Llama-3.2-1B, Llama-3-8B,
/// the 64-layer 5120-wide 32B shape; Qwen2-VL's ViT) or, where no such model exists (the
/// M/L vision and all Phi4-Audio sizes), are 4 x hidden with 64-wide heads.
#include <optional>
#include <string>
#include <vector>

#include "core/cluster.hpp"
#include "core/model.hpp"

namespace loom {

struct ModulePreset {
  std::string name;
  ModuleKind kind;
  std::string modality;
  int layers;
  LayerSpec layer;
  double table_params;  ///< the "# Params" column of Table 3.1, for checking the shapes
};

std::optional<ModulePreset> module_preset(const std::string& name);
std::vector<std::string> module_preset_names();

/// Link presets: "nvlink3" (A100), "nvlink4" (H100/H200), "nvlink-a40" (A40 NVLink
/// bridge), "pcie4", "ib-hdr" (200 Gb/s), "ib-ndr" (400 Gb/s).
std::optional<LinkSpec> link_preset(const std::string& name);
std::vector<std::string> link_preset_names();

}  // namespace loom
