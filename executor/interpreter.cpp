// The one interpreter loop every backend shares (STYLE.md point 9). Backends differ in
// what an op does, never in which op runs next.
#include <exception>
#include <string>
#include <utility>
#include <variant>

#include "core/errors.hpp"
#include "core/overloaded.hpp"
#include "executor/backend.hpp"

namespace loom::exec {

void run_program(const Schedule& schedule, RankId rank, RankBackend& backend,
                 const ExecOptions& options) {
  const std::vector<Op>& program = schedule.programs.at(rank);
  for (std::size_t index = 0; index < program.size(); ++index) {
    const Op& entry = program[index];
    try {
      if (options.fault && options.fault->rank == rank &&
          std::cmp_equal(options.fault->op_index, index))
        throw ExecError("injected fault");
      std::visit(Overloaded{[&](const Compute& op) { backend.compute(index, op); },
                            [&](const Send& op) { backend.send(index, op); },
                            [&](const Recv& op) { backend.recv(index, op); },
                            [&](const Collective& op) { backend.collective(index, op); },
                            [&](const OptimizerStep& op) { backend.optimizer_step(index, op); }},
                 entry);
    } catch (const InputError&) {
      throw;  // a property of the model, not of this rank: keep the exit code
    } catch (const std::exception& e) {
      throw ExecError("rank " + to_string(rank) + " op " + std::to_string(index) + " (" +
                      to_string(entry, schedule) + "): " + e.what());
    }
  }
}

}  // namespace loom::exec
