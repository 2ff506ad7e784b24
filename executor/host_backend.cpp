// Host backend: ranks are threads sharing one Transport. A rank that throws aborts the
// transport, so every other rank's wait ends at once with an error naming the first
// failure; the run then reports that failure (rank and operation) as ExecError.
#include "executor/host_backend.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <latch>
#include <thread>

#include "core/errors.hpp"
#include "core/index.hpp"
#include "core/matching.hpp"
#include "executor/profile.hpp"
#include "executor/transport.hpp"

namespace loom::exec {
namespace {

using Clock = std::chrono::steady_clock;

class HostRankBackend final : public RankBackend {
 public:
  HostRankBackend(const ExecProblem& problem, const LayerGraph& graph, Transport& transport,
                  const Matching& matching, RankId rank, const Clock::time_point& epoch)
      : schedule_(*problem.schedule),
        transport_(transport),
        matching_(matching),
        rank_(rank),
        epoch_(epoch),
        experts_(expert_group(schedule_, rank)),
        state_(problem, graph, schedule_.ranks.at(rank).replica, rank_layers(schedule_, rank),
               schedule_.cp_rank(rank), experts_.group),
        reduce_layers_(allreduce_layers(
            schedule_, *problem.model, rank,
            [this](const Collective& c) {
              return !c.tied_embedding && reduced_parameters(schedule_.group_members(c.group)) ==
                                              HostModelState::Reduced::kExperts;
            })),
        timings_(schedule_.programs.at(rank).size()) {}

  void compute(std::size_t index, const Compute& op) override {
    const double start = now();
    run_passes(state_, op);
    record(index, start);
  }

  void send(std::size_t index, const Send& op) override {
    const double start = now();
    Activation payload =
        op.tag.context_parallel() ? state_.context_send(op.tag) : state_.take_edge(edge_of(op.tag));
    transport_.send(rank_, op.peer, {op.tag, std::move(payload)});
    record(index, start);
  }

  void recv(std::size_t index, const Recv& op) override {
    const double start = now();
    Message m = transport_.recv(op.peer, rank_, op.tag);
    if (op.tag.context_parallel())
      state_.context_receive(op.tag, std::move(m.payload));
    else
      state_.put_edge(edge_of(op.tag), std::move(m.payload));
    record(index, start);
  }

  /// An async collective (Collective::async) runs here when reached, like a blocking one:
  /// a CPU thread has no second stream. The sums are the same; the timing shows no overlap.
  void collective(std::size_t index, const Collective& op) override {
    const double start = now();
    const std::vector<RankId>& group = schedule_.group_members(op.group);
    const int members = isize(group);
    const int member =
        static_cast<int>(std::find(group.begin(), group.end(), rank_) - group.begin());
    const InstanceId instance = matching_.instance_of({rank_, index});
    if (op.kind == CollectiveKind::kAllToAll) {
      // Ulysses' heads and rows under context parallelism (which the host runs without
      // expert parallelism), else a MoE layer's token copies: real data either way.
      const auto exchange = [&](std::vector<std::vector<float>> buffers) {
        return transport_.all_to_all(op.group, instance, member, members, std::move(buffers));
      };
      if (schedule_.cp > 1) {
        // HeadExchange's member m holds heads m: the group is the CP ranks in order.
        if (member != schedule_.cp_rank(rank_))
          throw std::logic_error("Ulysses: rank " + to_string(rank_) + " is member " +
                                 std::to_string(member) + " of its all-to-all, not its CP rank");
        state_.context_all_to_all(op.first_layer, exchange);
      } else {
        state_.expert_collective(exchange);
      }
    } else if (schedule_.cp > 1 && op.kind != CollectiveKind::kAllReduce && !op.async &&
               op.end_layer > op.first_layer) {
      // Context parallelism's K/V all-gather or dK/dV reduce-scatter (cp_comm =
      // "all-gather"): real data. A reduce-scatter is the all-reduce's sum, each member
      // keeping its own part.
      state_.context_collective(op.kind, [&](std::vector<float> buffer) {
        return op.kind == CollectiveKind::kAllGather
                   ? transport_.all_gather(op.group, instance, member, members, std::move(buffer))
                   : transport_.all_reduce(op.group, instance, member, members, std::move(buffer));
      });
    } else if (op.kind == CollectiveKind::kAllReduce) {
      const auto reduced =
          op.tied_embedding ? HostModelState::Reduced::kAll : reduced_parameters(group);
      // The experts' own all-reduce sums every expert the rank trains.
      const std::vector<int>& layers = reduced == HostModelState::Reduced::kExperts
                                           ? state_.trained_layers()
                                           : reduce_layers_.at(index);
      state_.set_flat_gradients(layers,
                                transport_.all_reduce(op.group, instance, member, members,
                                                      state_.flat_gradients(layers, reduced)),
                                reduced);
    } else {
      // The IR's all-gathers (context-parallel K/V, colocated module boundaries) carry data
      // the host math computes whole on one rank: move the bytes, use none of them.
      constexpr double kMaxFloats = 1 << 22;
      const double floats = std::min(kMaxFloats, op.bytes / 4 / std::max(members, 1));
      transport_.all_gather(op.group, instance, member, members,
                            std::vector<float>(static_cast<size_t>(floats)));
    }
    record(index, start);
  }

  std::vector<OpTiming> timings() override { return timings_; }
  void optimizer_step(std::size_t index, const OptimizerStep& /*op*/) override {
    const double start = now();
    state_.optimizer_step();
    stepped_ = true;
    record(index, start);
  }

  Gradients gradients() override { return state_.gradients(); }
  Parameters updated_parameters() override {
    return stepped_ ? state_.trained_parameters() : Parameters{};
  }

 private:
  /// The rank's expert-parallel group: the members of its all-to-alls (none: ep 1).
  struct ExpertPeers {
    ExpertGroup group;
    std::vector<RankId> members;
  };
  static ExpertPeers expert_group(const Schedule& schedule, RankId rank) {
    if (schedule.cp > 1) return {};  // its all-to-alls are Ulysses' (no EP with CP here)
    for (const Op& op : schedule.programs.at(rank)) {
      const auto* c = std::get_if<Collective>(&op);
      if (!c || c->kind != CollectiveKind::kAllToAll) continue;
      const std::vector<RankId>& members = schedule.group_members(c->group);
      const auto at = std::find(members.begin(), members.end(), rank) - members.begin();
      return {{isize(members), static_cast<int>(at)}, members};
    }
    return {};
  }
  /// Under expert parallelism an all-reduce over a group that holds another member of the
  /// rank's expert-parallel group is the data-parallel one (every gradient but the
  /// experts'); one that holds none is the experts' own (pass_placement.cpp).
  HostModelState::Reduced reduced_parameters(const std::vector<RankId>& group) const {
    if (experts_.group.ep == 1) return HostModelState::Reduced::kAll;
    for (RankId peer : experts_.members) {
      if (peer != rank_ && std::find(group.begin(), group.end(), peer) != group.end())
        return HostModelState::Reduced::kDense;
    }
    return HostModelState::Reduced::kExperts;
  }

  double now() const { return std::chrono::duration<double>(Clock::now() - epoch_).count(); }
  /// Op `index` of the rank's program ran from `start` until now.
  void record(std::size_t index, double start) { timings_[index] = {start, now()}; }

  const Schedule& schedule_;
  Transport& transport_;
  const Matching& matching_;
  RankId rank_;
  const Clock::time_point& epoch_;  ///< set by the executor once every rank is ready
  ExpertPeers experts_;
  HostModelState state_;
  std::map<std::size_t, std::vector<int>> reduce_layers_;
  std::vector<OpTiming> timings_;
  bool stepped_ = false;
};

/// The host runs context parallelism on a language model alone, on samples that split into
/// 2 x cp equal chunks (it pads nothing; the simulators' padding is a cost, not data).
void check_context_parallel_executable(const ExecProblem& problem) {
  const int cp = problem.schedule->cp;
  if (cp == 1) return;
  const Model& model = *problem.model;
  bool moe = false;
  for (int l = 0; l < model.num_layers(); ++l) moe = moe || model.layer(l).moe();
  for (const auto& program : problem.schedule->programs) {
    for (const Op& op : program) {
      const auto* c = std::get_if<Collective>(&op);
      if (moe && c && c->kind == CollectiveKind::kAllToAll)
        throw InputError(
            "parallel.cp: the host backend runs context parallelism on a mixture-of-experts "
            "model only without all-to-alls (parallel.ep = 1 and cp_comm = \"p2p\" or "
            "\"all-gather\"); simulate it with `loom sim`");
    }
  }
  if (model.modules().size() != 1)
    throw InputError(
        "parallel.cp: the host backend runs context parallelism on a language "
        "model alone (this model has " +
        std::to_string(model.modules().size()) + " modules); simulate it with `loom sim`");
  for (const Sample& sample : *problem.samples) {
    if (!sample.parts.empty())
      throw InputError(
          "workload.packing: the host backend runs packed samples without context "
          "parallelism only (its ring attention treats a pack as one sequence); "
          "set parallel.cp = 1 or workload.packing = \"none\", or simulate it "
          "with `loom sim`");
    int tokens = 0;
    for (const auto& [modality, n] : sample.tokens) tokens += n;
    if (tokens % (2 * cp) != 0)
      throw InputError("parallel.cp: sample " + std::to_string(sample.id) + " has " +
                       std::to_string(tokens) + " tokens, which do not split into 2 x cp = " +
                       std::to_string(2 * cp) + " equal chunks (the executor pads nothing)");
  }
}

class HostExecutor final : public Executor {
 public:
  std::string name() const override { return "host"; }

  std::vector<ProfileRow> profile(const Model& model, const Sample& first_sample,
                                  const ProfileRequest& request) override {
    check_model_executable(model);
    check_no_experts(model, "profiling");
    return profile_host(model, first_sample, request);
  }

  ExecResult run(const ExecProblem& problem, const ExecOptions& options) override {
    if (!options.rendezvous_file.empty())
      throw InputError("--rendezvous " + options.rendezvous_file +
                       ": the host backend runs every rank as a thread of one process, so "
                       "there is nothing to meet; it is for --backend cuda launches");
    const Schedule& schedule = *problem.schedule;
    check_model_executable(*problem.model);
    check_schedule_executable(schedule);
    check_context_parallel_executable(problem);
    const Matching matching = match_operations(schedule);  // InfeasibleError if unmatched
    const LayerGraph graph(*problem.model);
    const int n = schedule.num_ranks();
    Transport transport(options.timeout_s, n);
    PerRank<std::unique_ptr<HostRankBackend>> backends;
    Clock::time_point epoch;
    for (const RankId r : schedule.rank_ids()) {
      backends.push_back(
          std::make_unique<HostRankBackend>(problem, graph, transport, matching, r, epoch));
    }
    PerRank<std::exception_ptr> errors(n);
    PerRank<double> failed_at(n, 0);
    std::vector<std::thread> threads;
    // Time zero is when every rank's thread exists and its parameters are initialised,
    // so the iteration time is the schedule's, not thread start-up or initialisation.
    std::latch start(1);
    for (const RankId r : schedule.rank_ids()) {
      threads.emplace_back([&, r] {
        enable_flush_to_zero();
        start.wait();
        try {
          run_program(schedule, r, *backends[r], options);
          transport.finished();
        } catch (const std::exception& e) {
          errors[r] = std::current_exception();
          failed_at[r] = std::chrono::duration<double>(Clock::now() - epoch).count();
          transport.abort(e.what());
        }
      });
    }
    epoch = Clock::now();
    start.count_down();
    for (std::thread& t : threads) t.join();
    rethrow_first(errors, failed_at);
    ExecResult result;
    for (auto& b : backends) {
      result.timeline.timings.push_back(b->timings());
      if (!options.collect_tensors) continue;
      result.gradients.push_back(b->gradients());
      result.parameters.push_back(b->updated_parameters());
    }
    return result;
  }

 private:
  /// The root cause is the earliest failure; the others are aborts it caused.
  static void rethrow_first(const PerRank<std::exception_ptr>& errors,
                            const PerRank<double>& failed_at) {
    std::optional<RankId> first;
    for (const RankId r : errors.ids()) {
      if (errors[r] && (!first || failed_at[r] < failed_at[*first])) first = r;
    }
    if (first) std::rethrow_exception(errors[*first]);
  }
};

}  // namespace

std::unique_ptr<Executor> make_host_executor() {
  return std::make_unique<HostExecutor>();
}

}  // namespace loom::exec
