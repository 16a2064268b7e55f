#include <fmt/format.h>
#include <regex>

#include <sandboxer/duration.hpp>
#include <sandboxer/endpoint.hpp>
#include <sandboxer/error.hpp>
#include <sandboxer/spec_fields.hpp>
#include <sandboxer/spec_table.hpp>

namespace sandboxer::spec {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

const json k_string = {{"type", "string"}};
const json k_duration = {{"$ref", "#/$defs/duration"}};
const json k_duration_ms = {{"$ref", "#/$defs/duration_ms"}};

// The two duration forms every driver's schema refers to.
json duration_defs() {
  return {
      {"duration",
       {{"description",
         "a duration: whole numbers with units w, d, h, m, s, largest first, each at most once "
         "(90s, 15m, 1h30m, 0s); parse_duration's grammar (docs/profile-format.md). Or a value "
         "holding ${VAR}, checked after expansion"},
        {"type", "string"},
        {"anyOf",
         {{{"pattern", "^([0-9]+w)?([0-9]+d)?([0-9]+h)?([0-9]+m)?([0-9]+s)?$"}, {"minLength", 1}},
          {{"pattern", "\\$\\{"}}}}}},
      {"duration_ms",
       {{"description", "a duration, or whole milliseconds alone (500ms; no 1s500ms)"},
        {"anyOf",
         {{{"type", "string"}, {"pattern", "^[0-9]+ms$"}}, {{"$ref", "#/$defs/duration"}}}}}}};
}

Codec<milliseconds> duration_codec(bool zero_allowed, bool in_ms) {
  return {[zero_allowed](const json& value, const ReadContext& at) {
            return spec_fields::duration_at(value, at.pointer, zero_allowed);
          },
          [in_ms](const milliseconds& value) {
            return json(in_ms ? fmt::format("{}ms", value.count())
                              : spec_fields::duration_text(value));
          },
          k_duration_ms};
}

} // namespace

Codec<std::string> text() {
  return {[](const json& value, const ReadContext& at) {
            return spec_fields::text_at(value, at.pointer);
          },
          [](const std::string& value) { return json(value); }, k_string};
}

Codec<std::string> any_text() {
  return {[](const json& value, const ReadContext& at) {
            if (!value.is_string()) {
              throw SpecError(at.pointer, "expected a string");
            }
            return value.get<std::string>();
          },
          [](const std::string& value) { return json(value); }, k_string};
}

Codec<std::string> text_matching(const std::string& regex, std::string expected) {
  return text().checked([form = std::regex(regex), expected = std::move(expected)](
                            const std::string& value, const ReadContext& at) {
    if (!std::regex_match(value, form)) {
      throw SpecError(at.pointer, expected);
    }
  });
}

Codec<std::vector<std::string>> strings() {
  return {[](const json& value, const ReadContext& at) {
            return spec_fields::strings_at(value, at.pointer);
          },
          [](const std::vector<std::string>& value) { return json(value); },
          {{"type", "array"}, {"items", k_string}}};
}

Codec<std::map<std::string, std::string>> string_map() {
  return {[](const json& value, const ReadContext& at) {
            return spec_fields::map_at(value, at.pointer);
          },
          [](const std::map<std::string, std::string>& value) { return json(value); },
          {{"type", "object"}, {"additionalProperties", k_string}}};
}

Codec<bool> boolean() {
  return {[](const json& value, const ReadContext& at) {
            if (!value.is_boolean()) {
              throw SpecError(at.pointer, "expected true or false");
            }
            return value.get<bool>();
          },
          [](const bool& value) { return json(value); },
          {{"type", "boolean"}}};
}

Codec<int> integer(int low, int high) {
  return {[low, high](const json& value, const ReadContext& at) {
            return static_cast<int>(spec_fields::integer_at(value, at.pointer, low, high));
          },
          [](const int& value) { return json(value); },
          {{"type", "integer"}, {"minimum", low}, {"maximum", high}}};
}

Codec<milliseconds> duration_ms() {
  return duration_codec(false, false);
}
Codec<milliseconds> duration_in_ms() {
  return duration_codec(false, true);
}
Codec<milliseconds> duration_ms_or_zero() {
  return duration_codec(true, false);
}

Codec<std::chrono::seconds> seconds() {
  return {
      [](const json& value, const ReadContext& at) {
        auto parsed = value.is_string() ? parse_duration(value.get<std::string>()) : std::nullopt;
        if (!parsed) {
          throw SpecError(at.pointer, "invalid duration (use 30s, 2m)");
        }
        return *parsed;
      },
      [](const std::chrono::seconds& value) { return json(format_duration(value)); }, k_duration};
}

Codec<std::chrono::seconds> whole_seconds() {
  return {[](const json& value, const ReadContext& at) {
            milliseconds parsed = spec_fields::duration_at(value, at.pointer);
            if (parsed.count() % 1000 != 0) {
              throw SpecError(at.pointer, "expected whole seconds (10s, 1m)");
            }
            return std::chrono::duration_cast<std::chrono::seconds>(parsed);
          },
          [](const std::chrono::seconds& value) { return json(spec_fields::duration_text(value)); },
          k_duration_ms};
}

Codec<std::string> endpoint(std::string key, std::string credential) {
  return {[key, credential](const json& value, const ReadContext& at) {
            std::string url = spec_fields::text_at(value, at.pointer);
            try {
              return checked_endpoint(url, key, credential);
            } catch (const DriverError& e) {
              throw SpecError(at.pointer, e.what());
            }
          },
          [](const std::string& value) { return json(value); }, k_string};
}

Codec<fs::path> local_path(bool must_exist) {
  return {[must_exist](const json& value, const ReadContext& at) {
            return spec_fields::local_path_at(value, at.pointer, at.directory_of(at.pointer),
                                              must_exist && at.from_profile);
          },
          [](const fs::path& value) { return json(value.string()); },
          {{"type", "string"}, {"minLength", 1}}};
}

namespace detail {

void check_section(const json& section, const Shape& shape, const std::string& not_a_mapping,
                   const std::string& pointer) {
  if (!section.is_object()) {
    throw SpecError(pointer, not_a_mapping);
  }
  check_keys(section, shape.keys, pointer);
  for (const auto& key : shape.required_keys) {
    if (!section.contains(key)) {
      throw SpecError(pointer, fmt::format("missing required key \"{}\"", key));
    }
  }
}

json object_schema(const Shape& shape, const json& properties, const json& extra) {
  json out = {{"type", "object"}, {"additionalProperties", false}, {"properties", properties}};
  if (!shape.required_keys.empty()) {
    out["required"] = shape.required_keys;
  }
  out.merge_patch(extra);
  return out;
}

json schema(const std::string& driver, const Shape& shape, const json& properties,
            const json& extra, const json& defs) {
  json out = {
      {"$schema", "https://json-schema.org/draft/2020-12/schema"},
      {"$id", fmt::format("https://sandboxer.dev/schemas/drivers/{}.schema.json", driver)},
      {"title", fmt::format("the {0} driver's profile section (docs/drivers/{0}.md)", driver)},
      {"$defs", duration_defs()}};
  out["$defs"].merge_patch(defs);
  out.merge_patch(object_schema(shape, properties, extra));
  return out;
}

} // namespace detail
} // namespace sandboxer::spec
