#pragma once
/// A local process pool: `jobs` forked workers (no exec, so no start-up of the binary and
/// no re-parsing of the study) that each run one job after another. Workers are reused
/// (fork copies the page tables of a binary that maps CUDA libraries: ~15 ms a fork here),
/// except where `fresh_process` asks for one process per job: SimGrid allows one
/// simulation per process. A job that crashes its worker costs one row, not the sweep; a
/// new worker takes its place. The parent stays single-threaded, so fork is safe.
#include <functional>
#include <string>
#include <vector>

namespace loom::sweep {

/// Runs in the child; its return value is sent to the parent.
using JobFn = std::function<std::string(size_t job)>;
/// Runs in the parent when a job finished: `message` is what JobFn returned; `ok` is false
/// when the child died without answering (then `message` says how it died).
using DoneFn = std::function<void(size_t job, bool ok, const std::string& message)>;

/// Runs jobs 0..count-1. SIGINT / SIGTERM during the run stop it: running children are
/// terminated and their results dropped, DoneFn is not called for them, and the function
/// returns false (true when every job finished). Results arrive in completion order.
bool run_pool(size_t count, int jobs, bool fresh_process, const JobFn& job, const DoneFn& done);

/// The number of cores this process may use (sched_getaffinity), at least 1.
int core_count();

}  // namespace loom::sweep
