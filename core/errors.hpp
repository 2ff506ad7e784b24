#pragma once
/// Loom's error taxonomy, mapped to exit codes by the CLI (DESIGN.md, "Exit codes"):
///   InputError      -> 2  bad usage or invalid input; the message names file, key or line
///   InfeasibleError -> 3  a valid request that cannot run (out of memory, no layout fits,
///                         deadlocking schedule)
/// Anything else escaping to main is an internal error (exit 1).
#include <stdexcept>
#include <string>

namespace loom {

class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class InfeasibleError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace loom
