#pragma once
// Fixture of tests/check_include_layers.py: the lowering <-> planners cycle Loom had
// before the Eq 3.5 partitioner moved to schedulers/planners/partition/.
#include "schedulers/planners/layout/entrain_planner.hpp"
