// Fuzz target: the calibrated cost model's profile CSV (`cost.profile`:
// layer,phase,tokens,tp,seconds), fitted for configs/exec/vlm-host.toml's model and then
// asked for every layer's cost, as planning does.
#include <memory>

#include "app/study.hpp"
#include "core/cost_calibrated.hpp"
#include "core/workload.hpp"
#include "fuzz_support.hpp"

namespace {

const loom::Study& host_study() {
  static const std::unique_ptr<loom::Study> study =
      loom::load_study(loom::fuzz::source_path("configs/exec/vlm-host.toml"), {});
  return *study;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const loom::Study& study = host_study();
  const std::string path = loom::fuzz::write_input(data, size, "profile.csv");
  return loom::fuzz::run([&] {
    const loom::Model& model = study.config.model;
    const loom::CalibratedCostModel cost(model, study.config.cluster, path);
    std::vector<const loom::Sample*> microbatch;
    for (const loom::Sample& s : study.problem.samples) microbatch.push_back(&s);
    for (int l = 0; l < model.num_layers(); ++l) {
      const loom::MicrobatchShape shape = loom::layer_shape(model, l, microbatch);
      (void)cost.layer_cost(l, shape, 1);
    }
  });
}
