#include <charconv>
#include <cstdlib>
#include <fmt/format.h>

#include <sandboxer/driver.hpp>
#include <sandboxer/duration.hpp>
#include <sandboxer/spec_fields.hpp>

namespace sandboxer::spec_fields {

using nlohmann::json;

std::string text_at(const json& value, const std::string& pointer) {
  if (!value.is_string() || value.get_ref<const std::string&>().empty()) {
    throw SpecError(pointer, "expected a non-empty string");
  }
  return value.get<std::string>();
}

std::vector<std::string> strings_at(const json& value, const std::string& pointer) {
  if (!value.is_array()) {
    throw SpecError(pointer, "expected a list of strings");
  }
  std::vector<std::string> result;
  for (size_t i = 0; i < value.size(); ++i) {
    if (!value[i].is_string()) {
      throw SpecError(fmt::format("{}/{}", pointer, i), "expected a string");
    }
    result.push_back(value[i].get<std::string>());
  }
  return result;
}

std::map<std::string, std::string> map_at(const json& value, const std::string& pointer) {
  if (!value.is_object()) {
    throw SpecError(pointer, "expected a map of name: value");
  }
  std::map<std::string, std::string> result;
  for (const auto& [key, item] : value.items()) {
    if (item.is_string()) {
      result[key] = item.get<std::string>();
    } else if (item.is_number() || item.is_boolean()) {
      result[key] = item.dump();
    } else {
      throw SpecError(pointer + "/" + key, "expected a text value");
    }
  }
  return result;
}

std::chrono::milliseconds duration_at(const json& value, const std::string& pointer,
                                      bool zero_allowed) {
  std::optional<std::chrono::milliseconds> parsed;
  if (zero_allowed && value == "0") {
    parsed = std::chrono::milliseconds(0);
  } else if (value.is_string()) {
    parsed = parse_duration_ms(value.get<std::string>());
  }
  if (!parsed || parsed->count() < (zero_allowed ? 0 : 1)) {
    throw SpecError(pointer, zero_allowed ? "invalid duration (use 0, 500ms, 30s, 2m)"
                                          : "invalid duration (use 500ms, 30s, 2m)");
  }
  return *parsed;
}

long long integer_at(const json& value, const std::string& pointer, long long low, long long high) {
  long long parsed = 0;
  bool ok = false;
  if (value.is_number_integer()) {
    parsed = value.get<long long>();
    ok = true;
  } else if (value.is_string()) {
    const std::string& text = value.get_ref<const std::string&>();
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), parsed);
    ok = ec == std::errc() && end == text.data() + text.size() && !text.empty();
  }
  if (!ok || parsed < low || parsed > high) {
    throw SpecError(pointer, fmt::format("expected a whole number from {} to {}", low, high));
  }
  return parsed;
}

std::filesystem::path local_path_at(const json& value, const std::string& pointer,
                                    const std::filesystem::path& directory, bool must_exist) {
  std::filesystem::path path = text_at(value, pointer);
  const std::string text = path.string();
  if (text == "~" || text.starts_with("~/")) {
    const char* home = std::getenv("HOME");
    if (!home || !*home) {
      throw SpecError(pointer, "cannot expand ~: $HOME is not set");
    }
    path = std::filesystem::path(home) / text.substr(text.size() > 1 ? 2 : 1);
  }
  if (path.is_relative()) {
    path = directory / path;
  }
  path = path.lexically_normal();
  std::error_code ec;
  if (must_exist && !std::filesystem::is_regular_file(path, ec)) {
    throw SpecError(pointer, fmt::format("no such file: {}", path.string()));
  }
  return path;
}

std::string duration_text(std::chrono::milliseconds duration) {
  if (duration.count() % 1000 == 0) {
    return format_duration(std::chrono::duration_cast<Seconds>(duration));
  }
  return fmt::format("{}ms", duration.count());
}

} // namespace sandboxer::spec_fields
