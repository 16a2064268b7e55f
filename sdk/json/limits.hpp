#pragma once

// How deep and how large a JSON value from outside (a driver's answer, a record's info) may be.
// The ledger's reader refuses a document nested past k_max_depth; a value kept within
// k_max_value_depth leaves room for the levels the ledger wraps around it, so what the writer
// accepts the reader reads.

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace sandboxer::json_limits {

inline constexpr int k_max_value_depth = 64;
// A driver's `info` is read by every later command on the sandbox: it stays small.
inline constexpr size_t k_max_info_bytes = 64u << 10;

// Whether `value` nests more than `limit` levels (a scalar is level 0, `[1]` level 1). Iterative:
// a value a hundred thousand levels deep is answered without a deep stack.
inline bool deeper_than(const nlohmann::json& value, int limit) {
  std::vector<std::pair<const nlohmann::json*, int>> pending{{&value, 0}};
  while (!pending.empty()) {
    auto [node, depth] = pending.back();
    pending.pop_back();
    if (!node->is_structured()) {
      continue;
    }
    if (depth + 1 > limit) {
      return true;
    }
    for (const auto& item : *node) {
      pending.emplace_back(&item, depth + 1);
    }
  }
  return false;
}

// What is wrong with `value` as a stored field, or nothing: too deep, or (when `max_bytes` is not
// 0) longer than `max_bytes` once written.
inline std::optional<std::string> problem_of(const nlohmann::json& value, size_t max_bytes = 0) {
  if (deeper_than(value, k_max_value_depth)) {
    return "nested deeper than " + std::to_string(k_max_value_depth) + " levels";
  }
  if (max_bytes) {
    const size_t size = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).size();
    if (size > max_bytes) {
      return std::to_string(size) + " bytes, over the limit of " + std::to_string(max_bytes);
    }
  }
  return std::nullopt;
}

} // namespace sandboxer::json_limits
