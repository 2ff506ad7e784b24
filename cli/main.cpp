// loom: pipeline-schedule what-if studies for multimodal LLM training.
// Exit codes (DESIGN.md): 0 ok, 2 bad usage or input, 3 infeasible request, 1 internal.
#include <cmath>
#include <iostream>

#include "cli/commands.hpp"
#include "cli/staging.hpp"
#include "core/errors.hpp"
#include "core/resources.hpp"
#include "core/units.hpp"

// jemalloc, which the loom binary links when CMake finds it, reads its options from this
// symbol (glibc's malloc ignores it). One arena: the threads that write the output files and
// plan the partition views while the trace is written (cli/cmd_sim.cpp) then reuse the
// memory the SimGrid run freed instead of growing arenas of their own (an unfolded
// 16,384-GPU `loom sim` with every file written: peak 4.1 -> 3.6 GiB, in the same 81-84 s).
extern "C" const char* malloc_conf;
const char* malloc_conf = "narenas:1";

namespace {

const loom::Command kCommands[] = {
    {"sim",
     "Simulate one training iteration of a config (SimGrid or the contention-free evaluator)",
     loom::attach_sim},
    {"sweep",
     "Run a study: many points (axes x schedulers x seeds) on a process pool, one results.csv",
     loom::attach_sweep},
    {"config", "Check a config and print it resolved (file, --set overrides and defaults)",
     loom::attach_config},
    {"schedulers",
     "List the registered schedulers; `loom schedulers NAME` prints one with its options",
     loom::attach_schedulers},
    {"schedule",
     "Export a config's schedule to a file: the loom IR text or PyTorch's action CSV (see loom "
     "schedule export --help); loom sim --schedule FILE runs one",
     loom::attach_schedule},
    {"plan", "Run one planner on its own and print its plan (see loom plan --help)",
     loom::attach_plan},
    {"replay", "Replay a node-availability trace under a fault-tolerance policy (oobleck, ...)",
     loom::attach_replay},
    {"trace",
     "Inspect a node-availability trace or generate a synthetic one (see loom trace --help)",
     loom::attach_trace},
    {"exec", "Execute one iteration for real (host threads or CUDA) and check its gradients",
     loom::attach_exec},
    {"profile", "Time each layer's F/I/W over token counts and TP degrees (calibrated profile)",
     loom::attach_profile},
    {"compare", "Compare a prediction (loom sim) with a measurement (loom exec)",
     loom::attach_compare},
    {"cost",
     "Break a config's costs down: one layer's kernels, then the iteration (compute, TP/PP/DP "
     "communication, bubble, recompute)",
     loom::attach_cost},
    {"collective",
     "Predict one NCCL collective on a config's cluster for each algorithm (ring, tree, "
     "hierarchical) with NCCL's choice: time, algbw and busbw as nccl-tests reports them",
     loom::attach_collective},
    {"validate",
     "Predict published measured runs (a folder of configs with [validation]) and print the "
     "errors per run and backend",
     loom::attach_validate},
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Loom: pipeline-schedule what-if studies for distributed multimodal LLM training.\n"
      "A scheduler turns a config (model, cluster, workload, parallel layout) into a Schedule;\n"
      "a backend (SimGrid cluster model, or the contention-free evaluator) runs it and writes\n"
      "metrics.json, timeline.json (open in ui.perfetto.dev), timeline.csv, memory.csv and plots.\n"
      "Example: loom sim configs/examples/vlm-frozen.toml --out out/vlm"};
  app.set_version_flag("--version", std::string("loom ") + LOOM_VERSION + " (SimGrid " +
                                        LOOM_SIMGRID_VERSION + ", CUDA backend " +
                                        (LOOM_CUDA_BUILT ? "built" : "not built") + ")");
  app.require_subcommand(1);
  // Accepted before or after the subcommand (subcommands fall through to it).
  std::string max_memory;
  app.add_option("--max-memory", max_memory,
                 "Refuse (exit 3) work estimated to need more memory than this, e.g. 64GB "
                 "(default: $LOOM_MAX_MEMORY, else half this machine's memory)");
  app.fallthrough();
  app.footer(
      "Exit codes: 0 ok; 2 bad usage or invalid input (the message names file and key or line);\n"
      "3 valid but infeasible (out of memory, too few GPUs, a planned schedule that deadlocks;\n"
      "a --schedule file that deadlocks is invalid input, 2); 1 internal error.");
  std::vector<loom::CommandRun> runs;
  std::vector<CLI::App*> subs;
  for (const loom::Command& c : kCommands) {
    CLI::App* sub = app.add_subcommand(c.name, c.help);
    sub->footer(
        "Exit codes: 0 ok; 2 invalid input; 3 infeasible; 1 internal error (see loom --help).");
    subs.push_back(sub);
    runs.push_back(c.attach(*sub));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  loom::install_interrupt_handler();  // Ctrl-C: exit 130, no staging left behind
  try {
    if (!max_memory.empty()) {
      const auto bytes = loom::parse_bytes(max_memory);
      if (!bytes || !(*bytes > 0) || !std::isfinite(*bytes))
        throw loom::InputError("--max-memory: expected a size like 64GB or 512MiB, got '" +
                               max_memory + "'");
      loom::set_memory_limit(*bytes);
    }
    for (size_t i = 0; i < subs.size(); ++i) {
      if (subs[i]->parsed()) return runs[i]();
    }
    return 2;
  } catch (const loom::InputError& e) {
    std::cerr << "loom: error: " << e.what() << "\n";
    return 2;
  } catch (const loom::InfeasibleError& e) {
    std::cerr << "loom: infeasible: " << e.what() << "\n";
    return 3;
  } catch (const std::exception& e) {
    std::cerr << "loom: internal error: " << e.what() << "\n";
    return 1;
  }
}
