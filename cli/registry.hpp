#pragma once

#include <vector>

#include "core/catalog/catalog.hpp"

namespace sandboxer {

// The one table of drivers (cli/registry.cpp): every driver of the design, with its factory when
// this build has it.
const std::vector<BuiltinDriver>& builtin_drivers();

} // namespace sandboxer
