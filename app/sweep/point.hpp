#pragma once
/// One sweep point: its resolved config's hash (the key `--resume` and `merge` match rows
/// by) and running it in the current process.
#include <string>
#include <vector>

namespace loom::sweep {

/// What one point produced. Numbers are kept as their shortest round-trip text, so a row
/// read back from results.csv is the row that was written.
struct PointResult {
  std::string status;  ///< "ok", "infeasible" (InfeasibleError) or "failed"
  std::string iteration_time_s;
  std::string throughput_samples_per_s;
  std::string bubble_fraction;
  std::string peak_memory_max_bytes;   ///< max over ranks
  std::string peak_memory_mean_bytes;  ///< mean over ranks
  /// Model TFLOP/s per GPU, MFU and LLM tokens/s per GPU (core/model_flops.hpp).
  std::string tflops_per_gpu;
  std::string mfu;
  std::string tokens_per_s_per_gpu;
  /// The most loaded direction of any link between nodes (NIC, leaf or pod trunk) over the
  /// iteration, and its tier (core/link_load.hpp); "" when nothing leaves a node.
  std::string busiest_link_utilisation;
  std::string busiest_link_tier;
  std::string reason;  ///< why a point is infeasible or failed; "" when ok
  /// Host seconds run_point took (plan + simulate); not written to results (it varies).
  double wall_s = 0;
};

/// Shortest text that reads back as `v` ("0.30092", "1.6697e+09").
std::string number_text(double v);

/// The resolved configuration of `config` with `overrides` and the 16-hex-digit FNV-1a hash
/// of it (every key with its resolved value, defaults included, and the contents of the
/// workload CSV and cost profile it names; the config file's path is not part of it, so a
/// moved config keeps its hash). Throws InputError as load_config does.
struct Resolved {
  std::string hash;
  std::string scheduler;  ///< schedule.name
};
Resolved resolve(const std::string& config, const std::vector<std::string>& overrides);

/// Plans and runs one point in this process (the backend is `sim.backend` of the resolved
/// config). Errors become results: InputError -> "failed", InfeasibleError ->
/// "infeasible", anything else -> "failed" with "internal error: ...". SimGrid allows one
/// simulation per process: run SimGrid points each in a fresh process (pool.hpp). When
/// `timeline_csv` is given, an ok point also writes its timeline.csv there.
PointResult run_point(const std::string& config, const std::vector<std::string>& overrides,
                      const std::string& timeline_csv = "");

/// PointResult as one JSON line and back (the worker-to-parent message).
std::string to_message(const PointResult& r);
PointResult from_message(const std::string& text);

}  // namespace loom::sweep
