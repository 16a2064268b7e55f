#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <sandboxer/driver.hpp>

#include "core/errors.hpp"

namespace sandboxer::commands {

// `--label KEY=VALUE` (that value) or `--label KEY` (any value), repeatable; a record matches when
// it has every one. Shared by `list` and `destroy --label`, so that both select alike.
using LabelFilter = std::vector<std::pair<std::string, std::optional<std::string>>>;

// A UsageError names the first item that is neither form.
LabelFilter parse_label_filter(const std::vector<std::string>& items);
bool matches(const LabelFilter& filter, const Labels& labels);

} // namespace sandboxer::commands
