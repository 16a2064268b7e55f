#include "drivers/modal/spec.hpp"

#include <cmath>
#include <cstdlib>
#include <fmt/format.h>

#include <sandboxer/driver.hpp>
#include <sandboxer/duration.hpp>
#include <sandboxer/endpoint.hpp>
#include <sandboxer/error.hpp>
#include <sandboxer/spec_fields.hpp>
#include <sandboxer/spec_table.hpp>

namespace sandboxer::drivers::modal {
namespace {

using nlohmann::json;
using spec_fields::duration_at;

const char* const k_default_server = "https://api.modal.com:443";

// text() refuses "" when reading; the published schema says so too.
spec::Codec<std::string> nonempty_text() {
  return spec::text().described({{"minLength", 1}});
}

// Whole seconds within [1s, 24h]: Modal takes uint32 seconds and refuses more than a day.
spec::Codec<std::chrono::seconds> lifetime_codec() {
  return {[](const json& value, const spec::ReadContext& at) {
            auto ms = duration_at(value, at.pointer);
            if (ms.count() % 1000 != 0) {
              throw SpecError(at.pointer,
                              "Modal counts this in whole seconds (write 90s, 15m, 2h)");
            }
            auto seconds = std::chrono::duration_cast<std::chrono::seconds>(ms);
            if (seconds > k_max_timeout) {
              throw SpecError(at.pointer, fmt::format("Modal allows at most 24h, not {}",
                                                      format_duration(seconds)));
            }
            return seconds;
          },
          [](const std::chrono::seconds& value) { return json(format_duration(value)); },
          {{"$ref", "#/$defs/lifetime"}}};
}

// "never" keeps a snapshot until it is deleted; a duration is cut to whole seconds, Modal's unit.
spec::Codec<std::optional<std::chrono::seconds>> snapshot_ttl_codec() {
  return {
      [](const json& value, const spec::ReadContext& at) -> std::optional<std::chrono::seconds> {
        if (value.is_string() && value.get<std::string>() == "never") {
          return std::nullopt;
        }
        auto ms = duration_at(value, at.pointer);
        if (ms < std::chrono::seconds(1)) {
          throw SpecError(at.pointer, "expected at least 1s, or never");
        }
        return std::chrono::duration_cast<std::chrono::seconds>(ms);
      },
      [](const std::optional<std::chrono::seconds>& value) {
        return json(value ? format_duration(*value) : "never");
      },
      {{"anyOf", {{{"const", "never"}}, {{"$ref", "#/$defs/lifetime"}}}}}};
}

// Cores as Modal's SDKs take them (0.5, "2"), kept as the thousandths its API counts in.
spec::Codec<int> cpu_codec() {
  return {[](const json& value, const spec::ReadContext& at) {
            double cores = 0;
            if (value.is_number()) {
              cores = value.get<double>();
            } else if (value.is_string()) {
              char* end = nullptr;
              const std::string text = value.get<std::string>();
              cores = std::strtod(text.c_str(), &end);
              if (end == text.c_str() || *end != '\0') {
                cores = 0;
              }
            }
            if (!(cores >= 0.125 && cores <= 64)) {
              throw SpecError(at.pointer, "expected a number of cores from 0.125 to 64 (0.5, 2)");
            }
            return static_cast<int>(std::lround(cores * 1000));
          },
          [](const int& value) { return json(value / 1000.0); },
          {{"anyOf",
            {{{"type", "number"}, {"minimum", 0.125}, {"maximum", 64}},
             {{"type", "string"}, {"pattern", "^[0-9.]+$"}}}}}};
}

// A size ("512m", "4g") or a number of MiB, kept in MiB.
spec::Codec<int> memory_codec() {
  return {[](const json& value, const spec::ReadContext& at) {
            if (value.is_number_integer()) {
              return static_cast<int>(spec_fields::integer_at(value, at.pointer, 1, 1 << 22));
            }
            auto bytes = value.is_string() ? parse_size(value.get<std::string>()) : std::nullopt;
            if (!bytes || *bytes < (1u << 20)) {
              throw SpecError(at.pointer,
                              "expected a size such as 512m or 4g (or a number of MiB)");
            }
            return static_cast<int>(*bytes >> 20);
          },
          [](const int& value) { return json(value); },
          {{"anyOf",
            {{{"type", "integer"}, {"minimum", 1}},
             {{"type", "string"}, {"pattern", "^[0-9.]+ *([kKmMgGtT]([iI]?[bB])?)?$"}}}}}};
}

// One key for two members: "blocked" or "open" is the mode, a list of CIDRs makes it
// "allowlist".
spec::Field<Spec> network_field() {
  const json cidrs = {{"type", "array"}, {"items", {{"type", "string"}}}, {"minItems", 1}};
  return {
      "network",
      [](Spec& spec, const json& value, const spec::ReadContext& at) {
        if (value.is_array()) {
          spec.network = "allowlist";
          spec.allowed_cidrs = spec_fields::strings_at(value, at.pointer);
          if (spec.allowed_cidrs.empty()) {
            throw SpecError(at.pointer, "an empty list: write \"blocked\" to block every address");
          }
          return;
        }
        std::string text = value.is_string() ? value.get<std::string>() : value.dump();
        if (text != "blocked" && text != "open") {
          throw SpecError(at.pointer,
                          fmt::format("expected blocked, open or a list of CIDRs, not {}", text));
        }
        spec.network = text;
      },
      [](const Spec& spec, json& section) {
        section["network"] =
            spec.network == "allowlist" ? json(spec.allowed_cidrs) : json(spec.network);
      },
      {{"anyOf", {{{"enum", {"blocked", "open"}}}, cidrs}}}};
}

// The user's tags; "sandboxer." is kept for the tags sandboxer sets, which find its sandboxes.
spec::Codec<std::map<std::string, std::string>> tags_codec() {
  return spec::string_map()
      .checked([](const std::map<std::string, std::string>& tags, const spec::ReadContext& at) {
        for (const auto& [key, value] : tags) {
          if (key.starts_with("sandboxer.")) {
            throw SpecError(at.pointer + "/" + key,
                            "the \"sandboxer.\" prefix is reserved for the tags sandboxer sets");
          }
        }
      })
      .described({{"propertyNames", {{"not", {{"pattern", "^sandboxer\\."}}}}},
                  {"additionalProperties", {{"type", {"string", "number", "boolean"}}}}});
}

} // namespace

const spec::Table<Spec>& spec_table() {
  static const spec::Table<Spec> table = [] {
    spec::Table<Spec> t;
    t.driver = "modal";
    t.not_a_mapping = "expected a map of settings (image, cpu, memory, timeout, ...)";
    auto workdir =
        spec::text()
            .checked([](const std::string& path, const spec::ReadContext& at) {
              if (!path.starts_with("/")) {
                throw SpecError(at.pointer, "expected an absolute path inside the sandbox (/app)");
              }
            })
            .described({{"pattern", "^/"}});
    auto command =
        spec::strings()
            .checked([](const std::vector<std::string>& argv, const spec::ReadContext& at) {
              if (argv.empty()) {
                throw SpecError(at.pointer, "expected at least the program to run");
              }
            })
            .described({{"minItems", 1}});
    auto server_url = spec::endpoint("server_url", "token").described({{"pattern", "^https?://"}});
    using spec::field;
    using spec::Write;
    t.fields = {
        field("image", &Spec::image, nonempty_text()),
        field("app", &Spec::app, nonempty_text()),
        field("environment", &Spec::environment, nonempty_text()),
        field("cpu", &Spec::milli_cpu, cpu_codec()),
        field("memory", &Spec::memory_mb, memory_codec()),
        field("timeout", &Spec::timeout, lifetime_codec()),
        field("idle_timeout", &Spec::idle_timeout, lifetime_codec()),
        field("workdir", &Spec::workdir, workdir),
        field("command", &Spec::command, command),
        network_field(),
        field("tags", &Spec::tags, tags_codec(), "", Write::if_not_empty),
        field("server_url", &Spec::server_url, server_url),
        field("image_builder_version", &Spec::image_builder_version, nonempty_text()),
        field("client_type", &Spec::client_type, spec::integer(0, 99)),
        field("client_version", &Spec::client_version, nonempty_text()),
        field("call_timeout", &Spec::call_timeout, spec::duration_ms()),
        field("start_timeout", &Spec::start_timeout, spec::duration_ms()),
        field("snapshot_timeout", &Spec::snapshot_timeout, spec::duration_ms()),
        field("snapshot_ttl", &Spec::snapshot_ttl, snapshot_ttl_codec()),
        field("legacy_exec", &Spec::legacy_exec, spec::boolean()),
        field("attempts", &Spec::attempts, spec::integer(1, 10)),
    };
    // Not required() in the table: a missing image is told at its own pointer, with what to
    // write there.
    t.schema_extra = {{"required", json::array({"image"})}};
    t.after = [](Spec& spec) {
      if (spec.image.empty()) {
        throw SpecError("/image",
                        "missing: name a registry image (debian:12) or an image id (im-...)");
      }
    };
    t.defs = {{"lifetime",
               {{"description", "a duration of at least 1s (a sandbox's or snapshot's lifetime)"},
                {"$ref", "#/$defs/duration"},
                {"not", {{"pattern", "^(0+[wdhms])+$"}}}}}};
    return t;
  }();
  return table;
}

bool is_image_id(const std::string& reference) {
  return reference.starts_with("im-") && reference.find_first_of(":/") == std::string::npos;
}

Spec parse_spec(const json& section) {
  return spec::read(spec_table(), section);
}

json to_json(const Spec& spec) {
  return spec::write(spec_table(), spec);
}

std::string resolve_server_url(const Spec& spec) {
  if (spec.server_url) {
    return *spec.server_url;
  }
  std::string url = env_or_empty("MODAL_SERVER_URL");
  if (url.empty()) {
    return k_default_server;
  }
  return checked_endpoint(url, "MODAL_SERVER_URL", "token");
}

json location_of(const Spec& spec) {
  return {{"server_url", resolve_server_url(spec)}, {"environment", resolve_environment(spec)}};
}

Spec located(Spec spec, const json& location) {
  if (auto url = location.find("server_url"); url != location.end() && url->is_string()) {
    spec.server_url = url->get<std::string>();
  }
  // Recorded even when empty: "" is the workspace's default environment, whatever
  // MODAL_ENVIRONMENT says today.
  if (auto env = location.find("environment"); env != location.end() && env->is_string()) {
    spec.environment = env->get<std::string>();
  }
  return spec;
}

std::string resolve_environment(const Spec& spec) {
  return spec.environment.value_or(env_or_empty("MODAL_ENVIRONMENT"));
}

} // namespace sandboxer::drivers::modal
