#pragma once

#include <vector>

#include "src/catalog/catalog.hpp"

namespace sandboxer {

// The one table of drivers (src/registry.cpp): every driver of the design, with its factory when
// this build has it.
const std::vector<BuiltinDriver>& builtin_drivers();

} // namespace sandboxer
