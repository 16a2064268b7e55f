#include "drivers/docker/spec.hpp"

#include <charconv>
#include <fmt/format.h>
#include <regex>

#include <sandboxer/driver.hpp>
#include <sandboxer/duration.hpp>
#include <sandboxer/spec_table.hpp>

namespace sandboxer::drivers::docker {
namespace {

using nlohmann::json;
using spec::ReadContext;

const json k_string = {{"type", "string"}};
const json k_duration_ms = {{"$ref", "#/$defs/duration_ms"}};

// A command may be written as a list (argv, recommended) or as one string of words split on
// spaces; it is never handed to a shell.
spec::Codec<std::vector<std::string>> argv() {
  return {[](const json& value, const ReadContext& at) {
            std::vector<std::string> words;
            if (value.is_string()) {
              std::string text = value.get<std::string>();
              for (size_t start = 0; start < text.size();) {
                size_t end = text.find(' ', start);
                if (end != start) {
                  words.push_back(text.substr(start, end - start));
                }
                start = end == std::string::npos ? end : end + 1;
              }
            } else if (value.is_array()) {
              for (size_t i = 0; i < value.size(); ++i) {
                if (!value[i].is_string() && !value[i].is_number()) {
                  throw SpecError(fmt::format("{}/{}", at.pointer, i), "expected a string");
                }
                words.push_back(value[i].is_string() ? value[i].get<std::string>()
                                                     : value[i].dump());
              }
            } else {
              throw SpecError(at.pointer, "expected a list of strings, e.g. [sleep, infinity]");
            }
            return words;
          },
          [](const std::vector<std::string>& words) { return json(words); },
          {{"type", "array"}, {"items", k_string}, {"minItems", 1}}};
}

// parse_duration_ms's grammar, zero included (stop_timeout: 0s skips the stop), where
// spec::duration_ms refuses zero.
std::chrono::milliseconds millis_at(const json& value, const ReadContext& at) {
  std::optional<std::chrono::milliseconds> parsed;
  if (value.is_string()) {
    parsed = parse_duration_ms(value.get<std::string>());
  }
  if (!parsed) {
    throw SpecError(at.pointer, "invalid duration (use 500ms, 30s, 2m)");
  }
  return *parsed;
}

spec::Codec<std::chrono::milliseconds> millis() {
  return {millis_at,
          [](const std::chrono::milliseconds& duration) {
            return json(fmt::format("{}ms", duration.count()));
          },
          k_duration_ms};
}

// Any duration, cut to whole seconds (1500ms is 1s), stored as seconds alone (90s, not 1m30s).
spec::Codec<std::chrono::seconds> cut_to_seconds() {
  return {[](const json& value, const ReadContext& at) {
            return std::chrono::duration_cast<std::chrono::seconds>(millis_at(value, at));
          },
          [](const std::chrono::seconds& duration) {
            return json(fmt::format("{}s", duration.count()));
          },
          k_duration_ms};
}

spec::Codec<std::uint64_t> bytes() {
  return {[](const json& value, const ReadContext& at) {
            std::optional<std::uint64_t> parsed;
            if (value.is_string()) {
              parsed = parse_size(value.get<std::string>());
            } else if (value.is_number_unsigned()) {
              parsed = value.get<std::uint64_t>();
            }
            if (!parsed || *parsed == 0) {
              throw SpecError(at.pointer, "invalid size (use 512m, 2g)");
            }
            return *parsed;
          },
          [](const std::uint64_t& count) { return json(count); },
          {{"type", json::array({"string", "integer"})}, {"description", "a size: 512m, 2g"}}};
}

// A name, or a uid written as a number.
spec::Codec<std::string> user() {
  spec::Codec<std::string> codec = spec::text();
  codec.read = [text = codec.read](const json& value, const ReadContext& at) {
    return value.is_number_unsigned() ? value.dump() : text(value, at);
  };
  return codec;
}

spec::Codec<double> cpus() {
  return {[](const json& value, const ReadContext& at) {
            if (!value.is_number() || value.get<double>() <= 0) {
              throw SpecError(at.pointer, "expected a positive number of CPUs, e.g. 1 or 0.5");
            }
            return value.get<double>();
          },
          [](const double& count) { return json(count); },
          {{"type", "number"}, {"exclusiveMinimum", 0}}};
}

spec::Codec<std::int64_t> positive_integer() {
  return {[](const json& value, const ReadContext& at) {
            if (!value.is_number_integer() || value.get<std::int64_t>() < 1) {
              throw SpecError(at.pointer, "expected a positive integer");
            }
            return value.get<std::int64_t>();
          },
          [](const std::int64_t& count) { return json(count); },
          {{"type", "integer"}}};
}

Port port_at(const json& value, const ReadContext& at) {
  // "8080", "8080/udp", "127.0.0.1:9000:8080", "9000:8080/tcp"
  static const std::regex form(R"(^(?:(?:([0-9.]+):)?([0-9]+):)?([0-9]+)(?:/(tcp|udp))?$)");
  std::string text = value.is_number_unsigned() ? value.dump()
                     : value.is_string()        ? value.get<std::string>()
                                                : "";
  std::smatch m;
  if (!std::regex_match(text, m, form)) {
    throw SpecError(at.pointer, "expected a port: 8080, 9000:8080, 127.0.0.1:9000:8080 or 53/udp");
  }
  // The regex admits any digits: a number outside 1-65535 is the user's mistake, located, not
  // an overflow.
  auto number = [&](const std::ssub_match& digits, const char* which) {
    int parsed = 0;
    const std::string text_of_digits = digits.str();
    auto [end, ec] = std::from_chars(text_of_digits.data(),
                                     text_of_digits.data() + text_of_digits.size(), parsed);
    if (ec != std::errc() || parsed < 1 || parsed > 65535) {
      throw SpecError(at.pointer,
                      fmt::format("{} port {} is not between 1 and 65535", which, text_of_digits));
    }
    return parsed;
  };
  Port port;
  port.container_port = number(m[3], "container");
  if (m[2].matched) {
    port.host_port = number(m[2], "host");
  }
  if (m[1].matched) {
    port.host_ip = m[1];
  }
  if (m[4].matched) {
    port.protocol = m[4];
  }
  return port;
}

spec::Codec<Port> port() {
  return {port_at,
          [](const Port& published) {
            return json(published.host_port
                            ? fmt::format("{}:{}:{}/{}", published.host_ip, *published.host_port,
                                          published.container_port, published.protocol)
                            : fmt::format("{}/{}", published.container_port, published.protocol));
          },
          {{"type", json::array({"string", "integer"})}}};
}

const spec::Table<Mount>& mount_table() {
  static const spec::Table<Mount> table = [] {
    spec::Table<Mount> t;
    t.not_a_mapping = "expected a map";
    using spec::field;
    t.fields = {
        field("type", &Mount::type,
              spec::one_of<Mount::Type>({{"bind", Mount::Type::bind},
                                         {"tmpfs", Mount::Type::tmpfs},
                                         {"volume", Mount::Type::volume}})),
        field("source", &Mount::source, spec::text(), "", spec::Write::if_not_empty),
        field("target", &Mount::target, spec::text()),
        field("read_only", &Mount::read_only, spec::boolean()),
        field("size", &Mount::size_bytes, bytes()),
    };
    return t;
  }();
  return table;
}

// Which keys a mount needs depends on its type; each mistake is told where it is.
void check_mount(const Mount& mount, const ReadContext& at) {
  if (mount.target.empty()) {
    throw SpecError(at.pointer, "a mount needs a target (an absolute path in the container)");
  }
  if (mount.target.front() != '/') {
    throw SpecError(at.pointer + "/target", "expected an absolute path");
  }
  if (mount.type == Mount::Type::tmpfs) {
    if (!mount.source.empty()) {
      throw SpecError(at.pointer + "/source", "a tmpfs mount has no source");
    }
  } else if (mount.source.empty()) {
    throw SpecError(at.pointer, "a bind or volume mount needs a source");
  } else if (mount.type == Mount::Type::bind && mount.source.front() != '/') {
    throw SpecError(at.pointer + "/source", "a bind source must be an absolute host path");
  }
  if (mount.size_bytes && mount.type != Mount::Type::tmpfs) {
    throw SpecError(at.pointer + "/size", "only a tmpfs mount has a size");
  }
}

const spec::Table<Readiness>& readiness_table() {
  static const spec::Table<Readiness> table = [] {
    spec::Table<Readiness> t;
    t.not_a_mapping = "expected a map";
    using spec::field;
    t.fields = {
        field("command", &Readiness::command, argv()),
        field("timeout", &Readiness::timeout, millis()),
        field("interval", &Readiness::interval, millis()),
    };
    return t;
  }();
  return table;
}

// The shipped schema of a mount and of a readiness leaves their other keys to the reader, and
// requires keys the reader checks itself with its own message, or defaults (a mount's type).
json open_mapping(json required) {
  return {{"additionalProperties", nullptr}, {"required", std::move(required)}};
}

spec::Codec<Readiness> readiness() {
  spec::Codec<Readiness> codec =
      spec::object(readiness_table()).described(open_mapping(json::array({"command"})));
  // Checked on the mapping as written rather than on an empty command: `command: []` has always
  // been taken.
  codec.read = [read = codec.read](const json& value, const ReadContext& at) {
    Readiness parsed = read(value, at);
    if (!value.contains("command")) {
      throw SpecError(at.pointer, "readiness needs a command, e.g. [test, -e, /tmp/ready]");
    }
    return parsed;
  };
  return codec;
}

} // namespace

const spec::Table<Spec>& spec_table() {
  static const spec::Table<Spec> table = [] {
    spec::Table<Spec> t;
    t.driver = "docker";
    t.not_a_mapping = "expected a map";
    auto memory = bytes().checked([](const std::uint64_t& amount, const ReadContext& at) {
      if (amount < 6 * 1024 * 1024) {
        throw SpecError(at.pointer, "the Docker Engine needs at least 6m of memory");
      }
    });
    auto host = spec::text().checked([](const std::string& address, const ReadContext& at) {
      if (!address.starts_with("unix://") && !address.starts_with("tcp://")) {
        throw SpecError(at.pointer, "expected unix:///path/to/docker.sock or tcp://host:port");
      }
    });
    auto mounts = spec::list_of(spec::object(mount_table())
                                    .checked(check_mount)
                                    .described(open_mapping(json::array({"type", "target"}))),
                                "expected a list of mounts");
    using spec::field;
    using spec::Write;
    // In this order: a key with no close match is told the known keys in it.
    t.fields = {
        field("image", &Spec::image, spec::text()),
        field("command", &Spec::command, argv(), "", Write::if_not_empty),
        field("entrypoint", &Spec::entrypoint, argv()),
        field("env", &Spec::env, spec::string_map(), "", Write::if_not_empty),
        field("workdir", &Spec::workdir, spec::text()),
        field("user", &Spec::user, user()),
        field("cpus", &Spec::cpus, cpus()),
        field("memory", &Spec::memory_bytes, memory),
        field("pids_limit", &Spec::pids_limit, positive_integer()),
        field("network", &Spec::network, spec::text()),
        field("ports", &Spec::ports, spec::list_of(port(), "expected a list of ports"), "",
              Write::if_not_empty),
        field("mounts", &Spec::mounts, mounts, "", Write::if_not_empty),
        field("read_only", &Spec::read_only, spec::boolean()),
        field("cap_add", &Spec::cap_add, spec::strings(), "", Write::if_not_empty),
        field("cap_drop", &Spec::cap_drop, spec::strings(), "", Write::if_not_empty),
        field("security_opt", &Spec::security_opt, spec::strings(), "", Write::if_not_empty),
        field("pull", &Spec::pull,
              spec::one_of<Spec::Pull>({{"never", Spec::Pull::never},
                                        {"if-missing", Spec::Pull::if_missing},
                                        {"always", Spec::Pull::always}})),
        field("readiness", &Spec::readiness, readiness()),
        field("stop_timeout", &Spec::stop_timeout, cut_to_seconds()),
        field("host", &Spec::host, host),
        field("init", &Spec::init, spec::boolean()),
    };
    // Not a required field: a missing image is told after the keys (a misspelt one gets its
    // did-you-mean first), with an example.
    t.schema_extra = {{"required", json::array({"image"})}};
    t.after = [](Spec& spec) {
      if (spec.image.empty()) {
        throw SpecError("", "the docker section needs an image (e.g. image: debian:12)");
      }
      if (spec.network == "none" && !spec.ports.empty()) {
        throw SpecError("/ports", "ports cannot be published with network: none");
      }
    };
    return t;
  }();
  return table;
}

} // namespace sandboxer::drivers::docker
