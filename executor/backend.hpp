#pragma once
/// The executor's backend interface and the one interpreter loop every backend shares
/// (STYLE.md point 9: `for (op : program[rank]) visit(backend, op)`).
///
/// An executor runs a Schedule (core/schedule.hpp) for real: compute operations do the
/// model's math on real tensors, Send/Recv move real activations and gradients, and
/// collectives reduce real gradients. It honours exactly the IR semantics the simulator
/// models (eager sends, FIFO matching per channel = ordered rank pair + layer edge, see
/// core/matching.hpp; collectives that start when every member has arrived).
///
/// Data flow (what a backend keeps between operations, per rank):
///   - Every tensor that crosses an op boundary is named by an EdgeKey: the output of
///     layer `producer` consumed by layer `boundary` for one microbatch, either forward
///     activations (Pass::kF) or the gradient flowing back along that edge (Pass::kB).
///     A Send/Recv's MessageTag names exactly one EdgeKey (edge_of(tag)); a Compute reads
///     and writes the EdgeKeys of its layer range (executor/dataflow.hpp says which).
///   - F on layers [a, b) reads the F edges into layer a (or the sample's synthetic input
///     for an encoder's first layer), keeps what backward needs, writes the F edges out
///     of layer b-1 (or the loss gradient at the LLM's last layer).
///   - I (Bd) reads the B edges out of layer b-1 (summed over consumers; the loss
///     gradient at the LLM's last layer), writes the B edges into layer a, and keeps the
///     per-layer output gradients W needs. W (Bw) turns them into weight gradients and
///     frees the microbatch's state. B = I then W.
///   - Frozen layers get no weight gradient; layers with nothing trainable upstream
///     (Model::has_trainable_upstream false) get no backward at all.
///   - Weight gradients accumulate per parameter over microbatches; an all-reduce sums a
///     module's accumulated gradients over its group (executor/dataflow.hpp: which
///     parameters a collective covers).
/// A backend owns its buffers (host vectors, CUDA device memory); nothing here assumes
/// where a tensor lives.
///
/// Timing: a backend reports, per op, start/end seconds from one epoch shared by all
/// ranks of the run, with the meaning of core/timeline.hpp; the executor turns them into
/// the same Timeline `loom sim` writes.
///
/// Faults: every wait (Recv, collective) has a deadline (ExecOptions::timeout_s). A rank
/// whose op throws, or a wait that expires, ends the whole run with ExecError naming the
/// rank and the operation ("rank 2 op 7 (1RECV_F3<-1): ..."); no rank hangs silently.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/dataflow.hpp"
#include "core/model.hpp"
#include "core/schedule.hpp"
#include "core/timeline.hpp"
#include "core/workload.hpp"

namespace loom::exec {

/// The tensor between two ops (core/dataflow.hpp: the one dependency oracle).
using EdgeKey = DataEdge;
using loom::edge_of;

/// Names one parameter tensor: global layer index and the parameter's name inside the
/// layer ("wq", "w1", "norm1", ...; executor/layer_math.hpp lists them).
struct ParamKey {
  int layer = 0;
  std::string name;
  auto operator<=>(const ParamKey&) const = default;
};
/// Accumulated weight gradients (row-major float), by parameter.
using Gradients = std::map<ParamKey, std::vector<float>>;
/// Parameter values (row-major float), by parameter.
using Parameters = std::map<ParamKey, std::vector<float>>;

/// What every backend runs: one schedule over one model and its samples.
struct ExecProblem {
  const Schedule* schedule = nullptr;
  const Model* model = nullptr;
  /// The iteration's samples, indexed by the ids in Schedule::samples.
  const std::vector<Sample>* samples = nullptr;
  std::uint64_t seed = 0;  ///< parameters and synthetic data derive from it
};

/// Makes rank `rank` throw at its op `op_index` (tests kill a rank mid-run with it).
struct FaultInjection {
  RankId rank;
  int op_index = 0;
};

struct ExecOptions {
  double timeout_s = 60;  ///< the longest any Recv or collective waits for its peers
  std::optional<FaultInjection> fault;
  /// Multi-process backends (cuda): meet through this file on a shared file system instead
  /// of TCP (executor/cuda/bootstrap.hpp); empty = the environment decides. Single-process
  /// backends (host) have nothing to meet and reject it.
  std::string rendezvous_file;
  /// Return every rank's gradients and updated parameters (the gradient check's input).
  /// Off for timing runs: the cuda backend then leaves them on the GPUs instead of
  /// gathering the model twice over to every process's host memory.
  bool collect_tensors = true;
};

/// A run that could not complete: a rank failed or a wait timed out. The message names
/// the rank and operation. The CLI maps it to exit 1 (a runtime failure, not bad input).
class ExecError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A Compute op's passes on a backend's model state (host or CUDA): F forward, I input
/// gradients, W weight gradients, B both (I then W, as the fused backward).
template <class ModelState>
void run_passes(ModelState& state, const Compute& op) {
  if (op.pass == Pass::kF) {
    state.forward(op);
    return;
  }
  if (op.pass == Pass::kI || op.pass == Pass::kB) state.backward_input(op);
  if (op.pass == Pass::kW || op.pass == Pass::kB) state.backward_weight(op);
}

/// One rank's side of a backend: the interpreter calls exactly one method per op, in
/// program order. `index` is the op's position in the rank's program.
class RankBackend {
 public:
  virtual ~RankBackend() = default;
  virtual void compute(std::size_t index, const Compute& op) = 0;
  virtual void send(std::size_t index, const Send& op) = 0;
  virtual void recv(std::size_t index, const Recv& op) = 0;
  virtual void collective(std::size_t index, const Collective& op) = 0;
  /// Adam (executor/adam.hpp) over the trainable parameters the rank holds, with their
  /// accumulated and reduced gradients.
  virtual void optimizer_step(std::size_t index, const OptimizerStep& op) = 0;
  /// After the program ran: per op, timings from the run's common epoch (CUDA backends
  /// synchronise and read their events here).
  virtual std::vector<OpTiming> timings() = 0;
  /// After the program ran: this rank's accumulated (and, where the schedule all-reduces,
  /// reduced) weight gradients of the parameters it holds.
  virtual Gradients gradients() = 0;
  /// After the program ran: the trainable parameters it holds as its optimizer step left
  /// them; empty when its program has no OptimizerStep.
  virtual Parameters updated_parameters() = 0;
};

/// The interpreter loop: runs `rank`'s program on `backend`, one visit per op. A fault
/// injected for this rank throws at its op. Any exception escapes as ExecError naming
/// the rank, the op index and its text form (to_string(op, schedule)).
void run_program(const Schedule& schedule, RankId rank, RankBackend& backend,
                 const ExecOptions& options);

/// What a whole run returns.
struct ExecResult {
  Timeline timeline;
  PerRank<Gradients> gradients;    ///< none without collect_tensors
  PerRank<Parameters> parameters;  ///< after each rank's optimizer step (or empty)
};

struct ProfileRow;      // executor/profile.hpp
struct ProfileRequest;  // executor/profile.hpp

/// A backend as the CLI sees it: runs every rank of a problem. Only make_executor knows
/// which implementations exist.
class Executor {
 public:
  virtual ~Executor() = default;
  virtual std::string name() const = 0;
  /// Throws ExecError (rank failure, timeout), InputError (the model cannot be executed,
  /// e.g. mismatched module widths) or InfeasibleError (unmatched communication).
  virtual ExecResult run(const ExecProblem& problem, const ExecOptions& options) = 0;
  /// Times each module's layer (F, I, W) over the request's sweep on this backend's
  /// hardware (`loom profile`). The default throws InputError: the backend cannot profile.
  virtual std::vector<ProfileRow> profile(const Model& model, const Sample& first_sample,
                                          const ProfileRequest& request);
  /// This process's rank in a multi-process launch (cuda: one process per GPU, rank from
  /// the launcher's environment); 0 for backends that run every rank in one process.
  /// Every process returns the same complete ExecResult, so only rank 0 writes outputs.
  /// Throws InputError when the launcher's variables are malformed.
  virtual int process_rank() const { return 0; }
};

/// "host" always; "cuda" when the CUDA backend was built (CMake target loom_executor_cuda
/// from executor/cuda/, which defines make_cuda_executor(); the factory lives in the
/// target loom_executors, compiled with LOOM_HAVE_CUDA_EXECUTOR then). Throws
/// InputError naming the valid backends otherwise.
std::unique_ptr<Executor> make_executor(const std::string& name);
/// The backends this build has, for --help and errors.
std::vector<std::string> executor_names();
/// Defined by the CUDA backend (executor/cuda/) only in CUDA builds.
std::unique_ptr<Executor> make_cuda_executor();

}  // namespace loom::exec
