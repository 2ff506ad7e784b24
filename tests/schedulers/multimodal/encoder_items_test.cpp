// Per-item encoding under every scheduler (issue 49): an encoder runs a sample's images as
// a batch of item_tokens-long sequences, so four images of 577 tokens cost less than one
// sequence of 2,308 by exactly the attention work the concatenation adds.
#include <gtest/gtest.h>

#include "core/errors.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

/// Seconds of the vision encoder's forward over every rank (redundant copies aside), for
/// configs/examples/vlm-frozen.toml with 2,308 vision tokens a sample cut into items of
/// `item_tokens`; nullopt when `scheduler` does not serve the config.
std::optional<double> encoder_forward_s(const std::string& scheduler, int item_tokens) {
  std::unique_ptr<Study> st;
  try {
    st = test::example("vlm-frozen.toml",
                       {"schedule.name=" + scheduler, "workload.tokens.vision=2308",
                        "model.modules.vision.item_tokens=" + std::to_string(item_tokens)});
  } catch (const InputError&) {
    return std::nullopt;
  } catch (const InfeasibleError&) {
    return std::nullopt;
  }
  const ModuleId vision = st->config.model.module_index("vision").value();
  double total = 0;
  for (const auto& program : st->schedule.programs) {
    for (const Op& op : program) {
      const auto* c = std::get_if<Compute>(&op);
      if (c && c->pass == Pass::kF && c->module == vision && !c->redundant) total += c->seconds;
    }
  }
  return total;
}

TEST(EncoderItems, FourItemsCostLessThanTheirConcatenationUnderEveryScheduler) {
  // The analytical model at a fixed efficiency (the config's cost table): a bidirectional
  // layer's attention is 4 s^2 h FLOPs per sequence of s tokens, the rest linear in tokens.
  // So over all samples (8 microbatches of 2) and the encoder's layers, items of 577
  // instead of one 2,308-token sequence save
  //   16 x L x 4 h (2308^2 - 4 x 577^2) / (peak x efficiency),
  // and items of 1,154 save 2/3 of that ((2308^2 - 2 x 1154^2) / (2308^2 - 4 x 577^2)).
  const auto st = test::example("vlm-frozen.toml");
  const Model& model = st->config.model;
  const ModuleId vision = model.module_index("vision").value();
  int layers = 0;
  for (int l = 0; l < model.num_layers(); ++l) layers += model.module_of(l) == vision;
  const double h = model.layer(0).hidden;
  const double rate = st->config.cluster.gpu.peak_flops * st->config.cost.efficiency;
  const double saved = 16.0 * layers * 4 * h * (2308.0 * 2308 - 4.0 * 577 * 577) / rate;

  int ran = 0;
  for (const SchedulerInfo& info : scheduler_registry()) {
    const std::string name(info.name);
    const auto whole = encoder_forward_s(name, 0);
    if (!whole) continue;
    ++ran;
    const double items577 = encoder_forward_s(name, 577).value();
    const double items1154 = encoder_forward_s(name, 1154).value();
    EXPECT_LT(items577, *whole) << name;
    EXPECT_NEAR(*whole - items577, saved, 1e-9 * saved) << name;
    EXPECT_NEAR((*whole - items1154) / (*whole - items577), 2.0 / 3.0, 1e-9) << name;
  }
  EXPECT_GE(ran, 15) << "schedulers that ran the VLM";
}

}  // namespace
}  // namespace loom
