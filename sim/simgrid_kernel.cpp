#include "sim/simgrid_kernel.hpp"

#include <simgrid/forward.h>

#include <cstddef>
#include <list>

// Kernel classes that libsimgrid exports but its public headers leave opaque: only the
// members used here, declared as the library defines them.
namespace simgrid::kernel::activity {
class CommImpl {
 public:
  CommImpl* set_rate(double rate);
};
}  // namespace simgrid::kernel::activity
namespace simgrid::kernel::actor {
class ActorImpl {
 public:
  static ActorImpl* self();  ///< the actor whose context runs: maestro, for the backend
};
}  // namespace simgrid::kernel::actor

namespace loom::sim {
namespace {

using ActivityList = std::list<simgrid::kernel::activity::ActivityImplPtr>;

/// Maestro's activity list, or null where its place is not known. The offset of
/// ActorImpl::activities_ is read from libsimgrid.so.3.32's own code (CommImpl::detach
/// appends to, and CommImpl::finish removes from, `0xc0(maestro)`); other versions keep the
/// s4u path.
ActivityList* maestro_activities() {
  if constexpr (!kKnowsDetachedList) return nullptr;
  constexpr std::size_t kActivitiesOffset = 0xc0;
  auto* maestro = simgrid::kernel::actor::ActorImpl::self();
  if (maestro == nullptr) return nullptr;
  return reinterpret_cast<ActivityList*>(reinterpret_cast<char*>(maestro) + kActivitiesOffset);
}

}  // namespace

void set_comm_rate(simgrid::s4u::Comm& comm, double bytes_per_s) {
  // ActivityImpl is CommImpl's only base: same address.
  reinterpret_cast<simgrid::kernel::activity::CommImpl*>(comm.get_impl())->set_rate(bytes_per_s);
}

bool untrack_detached(const simgrid::s4u::Comm& comm) {
  ActivityList* list = maestro_activities();
  if (list == nullptr || list->empty() || list->back().get() != comm.get_impl()) return false;
  list->pop_back();  // the list's reference; the caller's CommPtr keeps the comm alive
  return true;
}

}  // namespace loom::sim
