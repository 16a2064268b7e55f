// The `events` sinks of a profile or of config.yaml: each type's keys, checked and normalized
// for the outbox (docs/events.md).
#include <algorithm>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <sandboxer/error.hpp>

#include "core/profile/document_reader.hpp"

namespace sandboxer::profile_internal {
namespace {

class SinkChecker : public DocumentReader {
public:
  using DocumentReader::DocumentReader;

  // The sinks of `events`, checked and normalized for the outbox: paths absolute with ~
  // expanded, durations as written, a token as a reference.
  json events() const {
    const json* events = find("events");
    if (events == nullptr) {
      return json::array();
    }
    if (!events->is_array()) {
      fail_at("/events", "events: expected a list of sinks, such as - {type: jsonl, path: FILE}");
    }
    json sinks = json::array();
    for (size_t i = 0; i < events->size(); ++i) {
      sinks.push_back(
          sink((*events)[i], "/events/" + std::to_string(i), fmt::format("events[{}]", i)));
    }
    return sinks;
  }

  json sink(const json& sink, const std::string& pointer, const std::string& field) const {
    if (!sink.is_object()) {
      fail_at(pointer, field + ": expected a map with a \"type\"");
    }
    if (!sink.contains("type")) {
      fail_at(pointer, fmt::format("{}: missing \"type\" (one of {})", field,
                                   fmt::join(k_sink_types, ", ")));
    }
    std::string type = text_of(sink["type"], pointer + "/type").value_or(sink["type"].dump());
    if (type == "stdout") {
      // `ID=$(sandboxer create -o json | jq -r .id)` must get the record alone.
      fail_at(pointer + "/type", field + ".type: stdout carries only the command's data; write "
                                         "events to stderr ({type: stderr}) or to a descriptor "
                                         "you open ({type: fd, fd: 3} with 3>FILE)");
    }
    if (!contains(k_sink_types, type)) {
      fail_at(pointer + "/type", fmt::format("{}.type: unknown sink type \"{}\"{}", field, type,
                                             suggestion(type, k_sink_types, "one of")));
    }
    static const std::map<std::string, std::vector<std::string>> k_keys = {
        {"jsonl", {"type", "path"}},
        {"http", {"type", "url", "headers", "token", "timeout", "retries"}},
        {"stderr", {"type"}},
        {"fd", {"type", "fd"}},
        {"exec", {"type", "command", "timeout"}}};
    check_keys(sink, k_keys.at(type), pointer, field);
    json out = {{"type", type}};
    auto required_text = [&](const char* key, const char* what) {
      auto text = sink.contains(key) ? text_of(sink[key], pointer + "/" + key) : std::nullopt;
      if (!text || text->empty()) {
        fail_at(sink.contains(key) ? pointer + "/" + key : pointer,
                fmt::format("{}: a {} sink needs \"{}\" ({})", field, type, key, what));
      }
      return *text;
    };
    if (type == "jsonl") {
      std::string path = expand_home(required_text("path", "the file to append events to"));
      if (!fs::path(path).is_absolute()) {
        fail_at(pointer + "/path", field + ".path: expected an absolute path (or ~/...), since "
                                           "commands run from any directory");
      }
      out["path"] = path;
    }
    if (type == "http") {
      std::string url = required_text("url", "where events are POSTed");
      if (!url.starts_with("http://") && !url.starts_with("https://")) {
        fail_at(pointer + "/url", field + ".url: expected an http:// or https:// URL");
      }
      out["url"] = url;
      if (sink.contains("headers")) {
        const json& headers = sink["headers"];
        if (!headers.is_object()) {
          fail_at(pointer + "/headers", field + ".headers: expected a map of header: value");
        }
        for (const auto& [name, value] : headers.items()) {
          auto text = text_of(value, pointer + "/headers/" + escape_token(name));
          std::string lower = name;
          std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
          if (lower == "authorization") {
            fail_at_key(pointer + "/headers/" + escape_token(name),
                        field + ".headers: no Authorization header inline; use token: {env: VAR} "
                                "or {file: PATH}, which is sent as a bearer token");
          }
          if (!text) {
            fail_at(pointer + "/headers/" + escape_token(name),
                    fmt::format("{}.headers.{}: expected text", field, name));
          }
          out["headers"][name] = *text;
        }
      }
      if (sink.contains("token")) {
        SecretRef ref = secret_ref(field + ".token", sink["token"], pointer + "/token");
        out["token"] = {{ref.kind == SecretRef::Kind::env ? "env" : "file", ref.source}};
      }
      if (sink.contains("retries")) {
        const json& retries = sink["retries"];
        if (!retries.is_number_integer() || retries.get<long>() < 0 || retries.get<long>() > 100) {
          fail_at(pointer + "/retries", field + ".retries: expected a whole number from 0 to 100");
        }
        out["retries"] = retries;
      }
    }
    if (type == "fd") {
      const json* fd = sink.contains("fd") ? &sink["fd"] : nullptr;
      if (fd == nullptr || !fd->is_number_integer() || fd->get<long>() < 2 ||
          fd->get<long>() > 1023) {
        fail_at(fd ? pointer + "/fd" : pointer,
                field + ": an fd sink needs \"fd\": a descriptor number from 2 to 1023 (0 and 1 "
                        "are the command's stdin and stdout)");
      }
      out["fd"] = *fd;
    }
    if (type == "exec") {
      const json* command = sink.contains("command") ? &sink["command"] : nullptr;
      if (command == nullptr || !command->is_array() || command->empty()) {
        fail_at(command ? pointer + "/command" : pointer,
                field + ": an exec sink needs \"command\": a list such as [/usr/local/bin/hook, "
                        "--flag] (argv, no shell)");
      }
      for (size_t i = 0; i < command->size(); ++i) {
        auto text = text_of((*command)[i], fmt::format("{}/command/{}", pointer, i));
        if (!text || text->empty()) {
          fail_at(fmt::format("{}/command/{}", pointer, i),
                  fmt::format("{}.command[{}]: expected text", field, i));
        }
        out["command"].push_back(*text);
      }
    }
    if (sink.contains("timeout")) {
      std::string text = text_of(sink["timeout"], pointer + "/timeout").value_or("");
      auto parsed = parse_duration_ms(text);
      if (!parsed || parsed->count() <= 0) {
        fail_at(pointer + "/timeout", fmt::format("{}.timeout: invalid duration \"{}\" (use "
                                                  "500ms, 5s, 1m)",
                                                  field, text));
      }
      out["timeout"] = text;
    }
    return out;
  }
};

} // namespace

nlohmann::json sinks_of(const fs::path& file, Document& doc) {
  return SinkChecker(file, doc).events();
}

} // namespace sandboxer::profile_internal
