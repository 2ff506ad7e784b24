#pragma once
/// Where each op of a schedule read from a file stands in that file, so that a message
/// about the schedule (a deadlock) points at the file's own line and step rather than at
/// Loom's program, which may hold ops the file does not have (the messages Loom's lowering
/// adds to a compute-only PyTorch CSV).
#include <optional>
#include <string>
#include <vector>

#include "core/index.hpp"

namespace loom {

struct OpOrigin {
  int line = 0;        ///< 1-based line in the file
  int column = 0;      ///< 1-based column of the action; 0 when the line is the op
  int step = 0;        ///< the op's step as the file numbers it (0-based)
  std::string action;  ///< the file's text for it ("1B0")
  /// Where it is when a line does not say it ("loom.1.et node 7": a Chakra trace's node).
  std::string place;
};

/// origins[rank][index] for programs[rank][index]; nullopt for an op the file does not have.
using OpOrigins = PerRank<std::vector<std::optional<OpOrigin>>>;

}  // namespace loom
