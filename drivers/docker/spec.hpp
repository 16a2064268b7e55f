#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include <sandboxer/spec_table.hpp>

namespace sandboxer::drivers::docker {

struct Mount {
  enum class Type { bind, tmpfs, volume };
  Type type = Type::bind;
  std::string source; // host path (bind) or volume name; empty for tmpfs
  std::string target; // absolute path in the container
  bool read_only = false;
  std::optional<std::uint64_t> size_bytes; // tmpfs only
};

struct Port {
  int container_port = 0;
  std::string protocol = "tcp";
  std::optional<int> host_port; // none: the engine picks one
  std::string host_ip = "127.0.0.1";
};

struct Readiness {
  std::vector<std::string> command;
  std::chrono::milliseconds timeout{30000};
  std::chrono::milliseconds interval{200};
};

// The profile's `docker:` section, validated. See docs/drivers/docker.md.
struct Spec {
  std::string image;
  std::vector<std::string> command;                   // empty: the image's CMD
  std::optional<std::vector<std::string>> entrypoint; // none: the image's ENTRYPOINT
  std::map<std::string, std::string> env;
  std::optional<std::string> workdir;
  std::optional<std::string> user;
  std::optional<double> cpus;
  std::optional<std::uint64_t> memory_bytes;
  std::optional<std::int64_t> pids_limit;
  std::string network = "bridge"; // none | bridge | <named network>
  std::vector<Port> ports;
  std::vector<Mount> mounts;
  bool read_only = false;
  std::vector<std::string> cap_add;
  std::vector<std::string> cap_drop;
  std::vector<std::string> security_opt;
  enum class Pull { never, if_missing, always };
  Pull pull = Pull::if_missing;
  std::optional<Readiness> readiness;
  std::chrono::seconds stop_timeout{10};
  // An init process (the engine's docker-init, tini) as PID 1: it forwards SIGTERM to the
  // command and reaps zombies, so a command that ignores SIGTERM as PID 1 (sleep) does not make
  // every destroy wait out stop_timeout. On by default; `init: false` for images that bring
  // their own.
  bool init = true;
  std::optional<std::string> host; // overrides DOCKER_HOST: unix:///path or tcp://host:port
};

// The fields of a `docker:` section: reading, the stored form and the schema.
const spec::Table<Spec>& spec_table();

} // namespace sandboxer::drivers::docker
