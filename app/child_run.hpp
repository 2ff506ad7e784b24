#pragma once
/// Running work in a forked child process: SimGrid allows one simulation per process, so a
/// process that runs several (loom replay's timer, loom validate, the Python module) runs
/// each in a child and gets back what it returned, or its error as the same kind.
#include <functional>
#include <string>

namespace loom {

/// Runs `work` in a forked child and returns the string it returned. The child's
/// InputError / InfeasibleError are rethrown as such, anything else as std::runtime_error
/// with its message (a child that dies without answering: one saying so). `poll`, if given,
/// runs in the parent every 100 ms while the child works; if it throws, the child is
/// killed and reaped and the exception propagates (the Python module stops a run on
/// Ctrl-C this way).
std::string run_in_child(const std::function<std::string()>& work,
                         const std::function<void()>& poll = {});

}  // namespace loom
