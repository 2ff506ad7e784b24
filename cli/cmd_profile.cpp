// `loom profile CONFIG`: times each module's layer (forward, backward-input,
// backward-weight) over token counts and TP degrees on an executor backend and writes the
// CSV the `calibrated` cost model fits (core/cost_calibrated.hpp):
//   loom profile C --out p.csv && loom sim C --set cost.model=calibrated --set cost.profile=p.csv
#include <filesystem>
#include <iostream>

#include "app/study.hpp"
#include "cli/commands.hpp"
#include "cli/run_output.hpp"
#include "cli/staging.hpp"
#include "core/config.hpp"
#include "core/errors.hpp"
#include "core/resources.hpp"
#include "core/workload.hpp"
#include "executor/backend.hpp"
#include "executor/profile.hpp"

namespace loom {
namespace {

struct ProfileCliOptions {
  std::string config;
  std::string out;  ///< default out/profile-<config name>.csv, like every command's out/
  std::string backend = "host";
  std::vector<std::string> overrides;
  std::vector<int> tokens;
  std::vector<int> tp = {1};
  int repeats = 5;
  bool quiet = false;
};

/// Refuses token counts whose tensors do not fit (exit 3): one layer at a time in fp32,
/// its activations (x, the MLP's inner width, gradients: ~8 copies) and, for attention,
/// the heads x tokens^2 scores.
void check_profile_size(const Model& model, const std::vector<int>& tokens) {
  for (const Module& m : model.modules()) {
    const LayerSpec& l = m.layers.front();
    for (const int t : tokens) {
      const double n = t;
      const double scores = l.kind == LayerKind::kTransformer ? n * n * l.heads * 4.0 : 0;
      const double bytes = scores + n * (l.hidden + l.ffn) * 4.0 * 8 +
                           static_cast<double>(l.hidden) * l.ffn * 4.0 * 3 * 3;
      check_memory_estimate("profile --tokens " + std::to_string(t) + " of module '" + m.name +
                                "' (" + std::to_string(l.heads) + " heads x tokens^2 scores)",
                            bytes, "profile fewer --tokens");
    }
  }
}

int run_profile(const ProfileCliOptions& o) {
  const Config config = load_study_config(o.config, o.overrides);
  check_profile_size(config.model, o.tokens);
  // The operating point: the workload's first sample (what the schedules run).
  Sample first;
  if (config.workload.csv.empty()) {
    first = synthetic_samples(1, config.workload.tokens).front();
  } else {
    first = load_samples_csv(config.workload.csv, config.workload.image_tokens).front();
  }
  const auto executor = exec::make_executor(o.backend);
  keep_freed_memory();
  exec::ProfileRequest request;
  request.tokens = o.tokens;
  request.tp = o.tp;
  request.repeats = o.repeats;
  if (!o.quiet) {
    request.on_progress = [](const std::string& module, double done) {
      std::cerr << "loom: profiled " << module << " (" << static_cast<int>(done * 100)
                << "% of modules)\n";
    };
    std::cerr << "loom: profiling " << config.model.modules().size() << " modules on "
              << executor->name() << " ...\n";
  }
  const std::vector<exec::ProfileRow> rows = executor->profile(config.model, first, request);
  if (rows.empty())
    throw InputError("--tp: no requested TP degree divides the model's heads and ffn");
  // Written beside the destination and renamed: never a half-written profile.
  StagedFile out(o.out.empty()
                     ? "out/profile-" + std::filesystem::path(o.config).stem().string() + ".csv"
                     : o.out,
                 "profile.csv");
  exec::write_profile_csv(out.path(), rows);
  out.commit();
  const std::filesystem::path& dest = out.destination();
  std::cout << "wrote " << dest.string() << " (" << rows.size()
            << " rows: layer,phase,tokens,tp,seconds)\n"
            << "use it: loom sim " << o.config << " --set cost.model=calibrated --set cost.profile="
            << std::filesystem::absolute(dest).string() << "\n";
  return 0;
}

}  // namespace

CommandRun attach_profile(CLI::App& sub) {
  auto o = std::make_shared<ProfileCliOptions>();
  sub.description(
      "Time each module's layer (F forward, I backward-input, W backward-weight) over a sweep of\n"
      "token counts and TP degrees on an executor backend, and write the CSV the `calibrated`\n"
      "cost model fits (T(x) = a x^2 + b x + c per layer and phase). Median of --repeats runs.\n"
      "Example: loom profile configs/exec/vlm-host.toml --out out/host-profile.csv");
  sub.add_option("CONFIG", o->config, "TOML config whose model is profiled")
      ->required()
      ->check(CLI::ExistingFile);
  sub.add_option("--out", o->out,
                 "Profile CSV to write, or a folder for FOLDER/profile.csv (default "
                 "out/profile-<config name>.csv)");
  sub.add_option("--backend", o->backend, "host or cuda")->check(CLI::IsMember({"host", "cuda"}));
  sub.add_option("--set", o->overrides, "Override a config key: section.key=value (repeatable)");
  sub.add_option("--tokens", o->tokens,
                 "Token counts to time (default: each module's tokens per sample x 0.25, 0.5, 1, "
                 "1.5, 2)")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 20));
  sub.add_option("--tp", o->tp, "TP degrees to time, as one GPU's shard (default 1)")
      ->delimiter(',')
      ->check(CLI::Range(1, 1024));
  sub.add_option("--repeats", o->repeats, "Timed runs per point; the median is written (default 5)")
      ->check(CLI::Range(1, 1000));
  sub.add_flag("--quiet,-q", o->quiet, "No progress messages on stderr");
  return [o]() { return run_profile(*o); };
}

}  // namespace loom
