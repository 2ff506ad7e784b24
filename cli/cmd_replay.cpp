// `loom replay CONFIG --trace FILE --policy P`: replays a node-availability trace against
// a training job under one fault-tolerance policy (dissertation ch. 2) and writes
// throughput.csv, events.csv and summary.json (replay/report.hpp).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "app/backends.hpp"
#include "app/replay_timer.hpp"
#include "app/study.hpp"
#include "cli/commands.hpp"
#include "cli/output_dir.hpp"
#include "cli/run_output.hpp"
#include "cli/trace_options.hpp"
#include "core/errors.hpp"
#include "core/index.hpp"
#include "replay/driver.hpp"
#include "replay/policies.hpp"
#include "replay/report.hpp"
#include "replay/throughput_table.hpp"
#include "traces/trace_io.hpp"

namespace loom {
namespace {

struct ReplayCliOptions {
  std::string config;
  std::string trace;
  std::string policy = "oobleck";
  double hours = 0;
  std::string out;
  std::string throughput_table;
  std::string backend;
  std::vector<std::string> overrides;
  TraceCliOptions trace_options;
  bool quiet = false;
  bool force = false;  ///< replace an existing --out folder
  bool json = false;   ///< print summary.json instead of the text summary
  bool plot = false;   ///< draw replay_throughput.png and replay_breakdown.png too
};

/// Oobleck's planning problem for the config's model (simulation mode).
oobleck::PlanningProblem planning_problem(const Study& study, int max_nodes, int global_batch) {
  const Config& c = study.config;
  const std::vector<const Sample*> microbatch =
      first_samples(study.problem.samples, c.schedule.microbatch_size);
  oobleck::PlanningProblem p;
  p.layers =
      oobleck::profile_from_model(c.model, *study.cost, microbatch, c.cluster, c.cost.memory);
  p.gpus_per_node = c.cluster.gpus_per_node;
  p.gpu_memory_bytes = c.cluster.gpu.memory_bytes;
  p.fault_tolerance = c.replay.fault_tolerance;
  p.max_nodes = max_nodes;
  p.microbatch_size = c.schedule.microbatch_size;
  p.global_batch = global_batch;
  return p;
}

/// The link a layer copy between two nodes crosses, from core's route model: GPU link,
/// NIC, NIC, GPU link (bandwidth the minimum, latencies added; core/cluster.hpp).
LinkSpec inter_node_route(Cluster cluster) {
  cluster.nodes = std::max(cluster.nodes, 2);
  LinkSpec link{0, 0};
  for (const Hop& hop : route(cluster, 0, cluster.gpus_per_node)) {
    const NetworkLink l = network_link(cluster, hop.link);
    link.bandwidth = link.bandwidth == 0 ? l.bandwidth : std::min(link.bandwidth, l.bandwidth);
    link.latency += l.latency;
  }
  return link;
}

/// The simulation-mode timer's options: the config and the user's overrides.
StudyTimerOptions study_timer_options(const ReplayCliOptions& o, const Config& c) {
  StudyTimerOptions t;
  t.config = o.config;
  t.overrides = o.overrides;
  t.backend = c.sim.backend;
  t.gpus_per_node = c.cluster.gpus_per_node;
  t.progress = !o.quiet;
  for (const Module& m : c.model.modules())
    t.modules.emplace_back(m.name, m.layers.empty() ? 2 : m.layers.front().dtype_bytes);
  t.optimizer_bytes_per_param = c.cost.memory.optimizer_bytes_per_param;
  return t;
}

/// Measured mode for bamboo-like. With Bamboo's own measured table: its time on the nodes
/// of its healthy pipelines, times what the cost model says a failover costs (the pipeline
/// with a stage on a neighbour against the healthy one). Without one: plain
/// training's measured time on the live nodes, times what the bamboo schedule costs
/// against plain 1F1B on the same pipelines and microbatches (its redundant forwards, no
/// recomputation, failover); what a smaller microbatch does to the measured plan's speed
/// is then outside the ratio (docs/replay.md). The bamboo schedule runs either way, so
/// memory decides whether Bamboo fits at all.
IterationTimer measured_bamboo_timer(IterationTimer table, IterationTimer study, bool own_table) {
  return [table, study, own_table](const Layout& bamboo) {
    if (bamboo.scheduler != "bamboo") return table(bamboo);
    Layout base = bamboo;
    for (PipelineLayout& p : base.pipelines) {
      if (own_table) p.nodes += isize(p.failed_over);  // the healthy one
      p.failed_over.clear();
    }
    if (!own_table) {
      base.scheduler = "";
      base.activation_checkpointing = true;  // only the ratio of times is used here
    }
    const double plain = study(base);
    if (!(plain > 0))
      throw InfeasibleError("bamboo-like: no pipeline to time on " + std::to_string(base.nodes()) +
                            " nodes");
    // With its own table Bamboo keeps the speed it had before the failure (the artifact's
    // step time from the last rendezvous) and the failed-over pipeline straggles on top.
    return table(own_table ? base : bamboo) * study(bamboo) / plain;
  };
}

/// Measured-throughput mode needs only the config (and the cost model for bamboo-like);
/// simulation mode plans the config's study (`study` is then set) for Oobleck's profile
/// and checks that the config runs.
PolicySetup make_setup(const ReplayCliOptions& o, const Config& c, const Study* study,
                       const AvailabilityTrace& trace) {
  PolicySetup s;
  s.params = c.replay;
  s.microbatch_size = c.schedule.microbatch_size;
  s.global_batch = c.replay.global_batch > 0
                       ? c.replay.global_batch
                       : c.parallel.dp * c.schedule.microbatches * c.schedule.microbatch_size;
  s.copy_link = inter_node_route(c.cluster);
  const std::string table_path =
      o.throughput_table.empty() ? c.replay.throughput_table : o.throughput_table;
  if (!table_path.empty()) {  // measured-throughput mode
    const ThroughputTable table = ThroughputTable::load(table_path, c.replay.throughput_model);
    s.min_pipeline_nodes = std::max(1, c.replay.min_pipeline_nodes);
    s.pipeline_depth = c.replay.baseline_pp > 0 ? c.replay.baseline_pp : s.min_pipeline_nodes;
    // Bamboo holds two stages' states (2x memory, §2.7.1): pipelines twice as deep, and
    // at least 2 nodes so that a stage has a neighbour to hold its copy.
    s.bamboo_pipeline_depth =
        c.replay.baseline_pp > 0 ? c.replay.baseline_pp : 2 * s.min_pipeline_nodes;
    IterationTimer timer = table.timer(s.global_batch);
    if (o.policy == "varuna-like" && !c.replay.varuna_throughput_table.empty())
      timer = ThroughputTable::load(c.replay.varuna_throughput_table, c.replay.throughput_model)
                  .timer(s.global_batch);
    if (o.policy == "bamboo-like") {
      const bool own = !c.replay.bamboo_throughput_table.empty();
      if (own)
        timer = ThroughputTable::load(c.replay.bamboo_throughput_table, c.replay.throughput_model)
                    .timer(s.global_batch);
      timer = measured_bamboo_timer(timer, make_study_timer(study_timer_options(o, c)), own);
    }
    s.timer = std::make_shared<MemoizedTimer>(timer);
    return s;
  }
  s.timer = std::make_shared<MemoizedTimer>(make_study_timer(study_timer_options(o, c)));
  int max_alive = isize(trace.initial);
  for (const AliveStep& step : alive_steps(trace)) max_alive = std::max(max_alive, step.alive);
  oobleck::PlanningProblem problem = planning_problem(*study, max_alive, s.global_batch);
  // Grids: Varuna-like morphs between the memory minimum n0 and one layer per stage;
  // Bamboo-like keeps the config's depth (or replay.baseline_pp).
  s.min_pipeline_nodes = oobleck::minimal_nodes(problem);
  s.pipeline_depth = c.replay.baseline_pp > 0 ? c.replay.baseline_pp : s.min_pipeline_nodes;
  s.max_pipeline_depth = c.replay.baseline_pp > 0 ? c.replay.baseline_pp : isize(problem.layers);
  s.bamboo_pipeline_depth = c.replay.baseline_pp > 0 ? c.replay.baseline_pp : c.parallel.pp;
  if (o.policy == "oobleck") {
    auto plan = std::make_shared<OobleckPlan>();
    plan->problem = std::move(problem);
    plan->templates = oobleck::generate_templates(plan->problem);
    s.oobleck = plan;
  }
  return s;
}

/// Bamboo-like's pipelines are rings of one-GPU nodes (a lost node is one stage) of at
/// least two nodes; anything else is a usage error, not an out-of-memory.
void check_bamboo_setup(const Config& c, const PolicySetup& s) {
  if (c.cluster.gpus_per_node != 1)
    throw InputError(
        "cluster.gpus_per_node: bamboo-like fails a node's stage over to its "
        "neighbour, one stage per node; set cluster.gpus_per_node = 1 (got " +
        std::to_string(c.cluster.gpus_per_node) + ")");
  const int depth = s.bamboo_pipeline_depth > 0 ? s.bamboo_pipeline_depth : s.pipeline_depth;
  if (depth < 2)
    throw InputError(
        "replay.baseline_pp: bamboo-like needs pipelines of at least 2 nodes (a "
        "stage's copy lives on its neighbour); got " +
        std::to_string(depth) + " from " +
        (c.replay.baseline_pp > 0 ? "replay.baseline_pp" : "the config") +
        "; set replay.baseline_pp >= 2");
}

int run_replay_command(ReplayCliOptions o) {
  if (!o.backend.empty()) o.overrides.push_back("sim.backend=" + o.backend);
  if (!(o.hours >= 0)) throw InputError("--hours: must be >= 0");
  {
    // The pipelines run replay.scheduler (the config's own study is planned with it too,
    // so a bad choice fails here, naming the scheduler).
    const Config c = load_study_config(o.config, o.overrides);
    if (o.policy == "bamboo-like" && c.replay.scheduler != "1f1b")
      throw InputError(
          "replay.scheduler: bamboo-like runs the bamboo schedule (1F1B with "
          "redundant computation), not '" +
          c.replay.scheduler + "'; leave replay.scheduler at 1f1b or pick oobleck or varuna-like");
    o.overrides.insert(o.overrides.begin(), "schedule.name=" + c.replay.scheduler);
  }
  const Config config = load_study_config(o.config, o.overrides);
  const bool measured = !o.throughput_table.empty() || !config.replay.throughput_table.empty();
  std::unique_ptr<Study> study;
  if (!measured) {
    if (!o.quiet) std::cerr << "loom: planning " << o.config << " ...\n";
    study = prepare_study(o.config, o.overrides);
  }
  const TraceOptions trace_options =
      trace_options_from_cli(o.trace_options, config.replay.notice_s);
  const AvailabilityTrace trace = load_availability_trace(o.trace, trace_options);
  const PolicySetup setup = make_setup(o, config, study.get(), trace);
  if (o.policy == "bamboo-like") check_bamboo_setup(config, setup);
  const std::unique_ptr<ReplayPolicy> policy = make_policy(o.policy, setup);
  // Staged before the run: a refused --out fails now, and an interrupt removes the staging.
  OutputDir out(o.out.empty() ? "out/replay-" + std::filesystem::path(o.config).stem().string() +
                                    "-" + o.policy
                              : o.out,
                o.force);
  ReplayOptions options;
  options.duration_s = o.hours * 3600;
  options.global_batch = setup.global_batch;
  // Bamboo-like admits joins by Bamboo's own rules: usable after replay.bamboo_join_delay,
  // then used at the next iteration boundary (its policy decides when).
  const bool bamboo = o.policy == "bamboo-like";
  options.join = bamboo ? JoinRule::kImmediate : join_rule_from_string(config.replay.join);
  options.node_ready_s = bamboo ? config.replay.bamboo_join_delay_s : config.replay.node_ready_s;
  if (!o.quiet)
    std::cerr << "loom: replaying " << o.trace << " (" << trace.events.size() << " events) with "
              << o.policy << " ...\n";
  const ReplayResult result = run_replay(trace, *policy, options);

  write_replay_outputs(result, out.file(""));
  // analysis/replay_plot.py reads the files just written (quiet: --json owns stdout).
  if (o.plot) run_analysis_script("replay_plot.py", {out.file(""), "-o", out.file(""), "--quiet"});
  out.commit();
  // A policy that stopped for good (out of memory) is a valid replay with its files, so
  // exit 0; but a 0 samples/s result is said on stderr, not left to be found in a table.
  if (!result.stop_reason.empty())
    std::cerr << "loom: warning: " << result.policy << " stopped for good at "
              << static_cast<long long>(result.stopped_at_s) << " s (" << result.stop_reason
              << ") after " << result.samples_committed
              << " samples; the rest of the trace counts as idle (summary.json: stopped)\n";
  if (o.json) {
    std::ifstream in(out.destination() / "summary.json");
    std::cout << in.rdbuf();
    return 0;
  }

  std::printf("policy %s, trace %s, %.2f h, global batch %d\n", result.policy.c_str(),
              o.trace.c_str(), result.duration_s / 3600, result.global_batch);
  std::printf("average throughput  %.4f samples/s (%lld iterations, %lld samples)\n",
              result.average_throughput(), result.iterations, result.samples_committed);
  std::printf("time                ");
  for (TimeUse use : {TimeUse::kTraining, TimeUse::kRestart, TimeUse::kCheckpoint,
                      TimeUse::kReconfiguration, TimeUse::kLostWork, TimeUse::kIdle}) {
    const double share = result.time_in(use) / result.duration_s;
    std::printf("%s %.1f%%%s", to_string(use), share * 100, use == TimeUse::kIdle ? "\n" : ", ");
  }
  if (!result.stop_reason.empty())
    std::printf("stopped at %.0f s: %s\n", result.stopped_at_s, result.stop_reason.c_str());
  std::printf("wrote %s/{throughput.csv, events.csv, summary.json%s}\n",
              out.destination().string().c_str(),
              o.plot ? ", replay_throughput.png, replay_breakdown.png" : "");
  return 0;
}

}  // namespace

CommandRun attach_replay(CLI::App& sub) {
  auto o = std::make_shared<ReplayCliOptions>();
  sub.description(
      sub.get_description() +
      ".\nSimulated time advances iteration by iteration; at every availability event the "
      "policy reconfigures and pays its cost\n(docs/replay.md). Iteration times come from "
      "a measured throughput table by live node count, or from the\nbackend for every "
      "layout the policy trains on. Writes DIR/throughput.csv (time_s,nodes,samples_per_s),\n"
      "DIR/events.csv (what the policy did and what it cost) and DIR/summary.json (average "
      "throughput, time breakdown).\nExample: loom replay "
      "configs/paper/oobleck-gpt3-6.7b-measured.toml --trace traces/oobleck/10m.csv "
      "--policy varuna-like\nTable 2.2: /usr/bin/python3 analysis/table_2_2.py");
  sub.add_option("CONFIG", o->config, "TOML config with a [replay] table (see configs/paper/)")
      ->required()
      ->check(CLI::ExistingFile);
  sub.add_option("--trace", o->trace,
                 "Node-availability trace (EC2/Oobleck events CSV or GCP counts; traces/)")
      ->required();
  std::string names;
  for (const std::string& n : policy_names()) names += (names.empty() ? "" : ", ") + n;
  sub.add_option("--policy", o->policy, "Fault-tolerance policy: " + names + " (default oobleck)");
  sub.add_option("--hours", o->hours, "Replay window in hours (default: the whole trace)");
  sub.add_option("--out", o->out,
                 "Output directory, replaced as a whole (default: out/replay-<config>-<policy>)");
  sub.add_option("--throughput-table", o->throughput_table,
                 "Measured samples/s by live node count (CSV nodes,samples_per_s or the "
                 "Oobleck artifact JSON) instead of simulated iteration times");
  sub.add_option("--backend", o->backend,
                 "Iteration times from " + backend_name_list() +
                     " (default: the config's sim.backend); a backend that runs once per "
                     "process gets one forked run per distinct layout")
      ->check(CLI::IsMember(backend_names()));
  add_trace_options(sub, o->trace_options, "the config's replay.notice");
  sub.add_option("--set", o->overrides,
                 "Override a config key (repeatable), e.g. --set replay.fault_tolerance=2");
  sub.add_flag("--quiet,-q", o->quiet, "No progress messages on stderr");
  sub.add_flag("--force", o->force, "Replace --out if it holds the output of an earlier run");
  sub.add_flag("--plot", o->plot,
               "Also draw DIR/replay_throughput.png (throughput, alive nodes, restart and "
               "reconfiguration markers) and DIR/replay_breakdown.png (analysis/replay_plot.py; "
               "several runs in one figure: run the script on their directories)");
  sub.add_flag("--json", o->json,
               "Print summary.json (the same fields) instead of the text summary");
  return [o]() { return run_replay_command(*o); };
}

}  // namespace loom
