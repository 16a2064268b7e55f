#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

// Typed reads of a driver's profile section for parse_spec: each throws SpecError naming the
// JSON pointer of the bad value, with what was expected.
namespace sandboxer::spec_fields {

// A non-empty string.
std::string text_at(const nlohmann::json& value, const std::string& pointer);
// A list of strings.
std::vector<std::string> strings_at(const nlohmann::json& value, const std::string& pointer);
// A map of name: value; numbers and booleans are kept as their text.
std::map<std::string, std::string> map_at(const nlohmann::json& value, const std::string& pointer);
// A duration above zero ("500ms", "30s", "2m"); with `zero_allowed`, also none at all ("0",
// "0s"), for a setting whose absence is a choice (a wait to skip) rather than a timeout.
std::chrono::milliseconds duration_at(const nlohmann::json& value, const std::string& pointer,
                                      bool zero_allowed = false);
// An integer within [low, high], written as a number or as its digits.
long long integer_at(const nlohmann::json& value, const std::string& pointer, long long low,
                     long long high);
// A path on this machine: "~/" expands to $HOME, a relative path resolves against `directory`
// (the profile's, SpecOrigin), the result is lexically normal. With `must_exist`, it must name a
// regular file.
std::filesystem::path local_path_at(const nlohmann::json& value, const std::string& pointer,
                                    const std::filesystem::path& directory, bool must_exist);
// The text of a duration as parse_duration_ms reads it back ("1500ms", "30s", "2m").
std::string duration_text(std::chrono::milliseconds duration);

} // namespace sandboxer::spec_fields
