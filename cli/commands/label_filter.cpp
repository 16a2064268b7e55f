#include "cli/commands/label_filter.hpp"

#include <algorithm>
#include <fmt/format.h>

#include <sandboxer/error.hpp>

#include "core/errors.hpp"

namespace sandboxer::commands {

LabelFilter parse_label_filter(const std::vector<std::string>& items) {
  LabelFilter filter;
  for (const auto& item : items) {
    auto eq = item.find('=');
    if (eq == 0 || item.empty()) {
      throw UsageError(fmt::format("--label \"{}\": expected KEY=VALUE or KEY", item));
    }
    filter.emplace_back(item.substr(0, eq), eq == std::string::npos
                                                ? std::nullopt
                                                : std::optional(item.substr(eq + 1)));
  }
  return filter;
}

bool matches(const LabelFilter& filter, const Labels& labels) {
  return std::all_of(filter.begin(), filter.end(), [&](const auto& wanted) {
    auto it = labels.find(wanted.first);
    return it != labels.end() && (!wanted.second || it->second == *wanted.second);
  });
}

} // namespace sandboxer::commands
