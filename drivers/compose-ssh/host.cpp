#include "drivers/compose-ssh/host.hpp"

#include <fmt/format.h>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include <sandboxer/error.hpp>
#include <sandboxer/interrupt.hpp>
#include <sandboxer/log.hpp>

namespace sandboxer::drivers::compose_ssh {
namespace {

using Kind = DriverError::Kind;

constexpr const char* k_project_label = "com.docker.compose.project";
// One line per container: fields a tab apart, in this order.
constexpr const char* k_ps_format =
    "{{.ID}}\t{{.Label \"com.docker.compose.service\"}}\t{{.State}}\t"
    "{{.Status}}\t{{.Label \"com.docker.compose.version\"}}";

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(separator, start);
    if (end == std::string::npos) {
      end = text.size();
    }
    parts.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

} // namespace

std::string Container::health() const {
  for (const char* word : {"(healthy)", "(unhealthy)", "(health: starting)"}) {
    if (status.find(word) != std::string::npos) {
      return std::string(word) == "(healthy)"     ? "healthy"
             : std::string(word) == "(unhealthy)" ? "unhealthy"
                                                  : "starting";
    }
  }
  return "";
}

std::optional<int> Container::exit_code() const {
  // "Exited (137) 2 seconds ago"
  size_t open = status.find('(');
  if (!status.starts_with("Exited") || open == std::string::npos) {
    return std::nullopt;
  }
  try {
    return std::stoi(status.substr(open + 1));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

void all_at_once(const std::vector<std::function<void()>>& tasks) {
  std::vector<std::exception_ptr> failures(tasks.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < tasks.size(); ++i) {
    threads.emplace_back([&, i] {
      // Each is one bounded remote command; a signal ends the sandboxer command after them, not
      // in the middle of a teardown.
      interrupt::Shield shield;
      try {
        tasks[i]();
      } catch (...) {
        failures[i] = std::current_exception();
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  for (const auto& failure : failures) {
    if (failure) {
      std::rethrow_exception(failure);
    }
  }
}

Host::Host(const Ssh& ssh, std::chrono::milliseconds command_timeout)
    : m_ssh(ssh), m_timeout(command_timeout) {}

proc::Result Host::run(const std::vector<std::string>& argv) const {
  RemoteCall call;
  call.argv = argv;
  call.timeout = m_timeout;
  return m_ssh.run(call);
}

std::string Host::check(const std::vector<std::string>& argv, const std::string& what) const {
  auto result = run(argv);
  if (result.exit_code == 127) {
    throw DriverError(Kind::error, fmt::format("compose-ssh: {} on {}: '{}' is not installed there",
                                               what, where(), argv.front()));
  }
  if (result.exit_code != 0) {
    throw DriverError(Kind::error, fmt::format("compose-ssh: {} on {} failed: {}", what, where(),
                                               last_lines(result.err, 3)));
  }
  return result.out;
}

std::vector<std::string> Host::lines(const std::vector<std::string>& argv,
                                     const std::string& what) const {
  std::vector<std::string> out;
  for (auto& line : split(check(argv, what), '\n')) {
    if (!line.empty()) {
      out.push_back(std::move(line));
    }
  }
  return out;
}

std::vector<std::string> Host::compose_command() const {
  static std::mutex mutex;
  static std::map<std::string, bool> has_plugin;
  {
    std::lock_guard lock(mutex);
    if (auto it = has_plugin.find(where()); it != has_plugin.end()) {
      return it->second ? std::vector<std::string>{"docker", "compose"}
                        : std::vector<std::string>{"docker-compose"};
    }
  }
  auto result = run({"docker", "compose", "version", "--short"});
  if (result.exit_code == 127) {
    throw DriverError(Kind::error,
                      fmt::format("compose-ssh: docker is not installed on {}", where()));
  }
  const bool plugin = result.exit_code == 0;
  std::lock_guard lock(mutex);
  has_plugin[where()] = plugin;
  return plugin ? std::vector<std::string>{"docker", "compose"}
                : std::vector<std::string>{"docker-compose"};
}

void Host::upload(const std::vector<TarEntry>& entries) const {
  RemoteCall call;
  call.argv = {"tar", "-x", "-f", "-", "--no-same-owner"};
  call.timeout = m_timeout;
  call.stdin_data = tar_archive(entries);
  auto result = m_ssh.run(call);
  if (result.exit_code != 0) {
    throw DriverError(Kind::error, fmt::format("compose-ssh: cannot write files on {}: {}", where(),
                                               last_lines(result.err, 3)));
  }
}

std::string Host::read(const std::string& path, const std::string& what) const {
  auto result = run({"cat", "--", path});
  if (result.exit_code != 0) {
    throw DriverError(Kind::not_found,
                      fmt::format("compose-ssh: {} is not on {} ({})", what, where(), path));
  }
  return result.out;
}

std::vector<Container> Host::parse_containers(const std::string& listing, bool with_labels) const {
  std::vector<Container> containers;
  for (const auto& line : split(listing, '\n')) {
    auto fields = split(line, '\t');
    if (fields.size() < 5 || fields[0].empty()) {
      continue;
    }
    containers.push_back({fields[0], fields[1], fields[2], fields[3], fields[4], {}});
  }
  if (with_labels && !containers.empty()) {
    std::vector<std::string> inspect = {"docker", "inspect", "--format", "{{json .Config.Labels}}"};
    for (const auto& container : containers) {
      inspect.push_back(container.id);
    }
    auto labels = lines(inspect, "reading container labels");
    for (size_t i = 0; i < containers.size() && i < labels.size(); ++i) {
      auto parsed = nlohmann::json::parse(labels[i], nullptr, false);
      if (parsed.is_object()) {
        for (const auto& [key, value] : parsed.items()) {
          if (value.is_string()) {
            containers[i].labels[key] = value.get<std::string>();
          }
        }
      }
    }
  }
  return containers;
}

std::vector<Container> Host::containers(const std::string& project, bool with_labels) const {
  auto listing =
      check({"docker", "ps", "-a", "--no-trunc", "--filter",
             fmt::format("label={}={}", k_project_label, project), "--format", k_ps_format},
            "listing the containers of project " + project);
  return parse_containers(listing, with_labels);
}

std::vector<Container> Host::containers_labelled(const Labels& selector) const {
  std::vector<std::string> argv = {
      "docker", "ps", "-a", "--no-trunc", "--filter", std::string("label=") + k_project_label};
  for (const auto& [key, value] : selector) {
    argv.insert(argv.end(), {"--filter", fmt::format("label={}={}", key, value)});
  }
  argv.insert(argv.end(), {"--format", k_ps_format});
  return parse_containers(check(argv, "listing sandboxer's containers"), true);
}

void Host::tear_down(const std::string& project, std::chrono::seconds grace) const {
  const std::string filter = fmt::format("label={}={}", k_project_label, project);
  // Listing is independent of removing the containers, and the removals after it of each other:
  // each group runs at once over the shared connection, so a destroy costs three round trips.
  std::vector<std::string> ids, networks, volumes, images;
  all_at_once({
      [&] {
        ids = lines({"docker", "ps", "-aq", "--no-trunc", "--filter", filter},
                    "listing the containers of project " + project);
      },
      [&] {
        networks = lines({"docker", "network", "ls", "-q", "--filter", filter},
                         "listing the networks of project " + project);
      },
      [&] {
        volumes = lines({"docker", "volume", "ls", "-q", "--filter", filter},
                        "listing the volumes of project " + project);
      },
      // Images compose built are named after the project (v1 P_service, v2 P-service); removing
      // the name only untags an image that something else (a snapshot) still names.
      [&] {
        images = lines({"docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}", "--filter",
                        "reference=" + project + "_*", "--filter", "reference=" + project + "-*"},
                       "listing the images of project " + project);
      },
  });
  if (!ids.empty()) {
    if (grace.count() > 0) {
      std::vector<std::string> stop = {"docker", "stop", "-t", std::to_string(grace.count())};
      stop.insert(stop.end(), ids.begin(), ids.end());
      RemoteCall call;
      call.argv = stop;
      call.timeout = m_timeout + grace;
      m_ssh.run(call); // a failure here is met by rm -f below
    }
    std::vector<std::string> remove = {"docker", "rm", "-f", "-v"};
    remove.insert(remove.end(), ids.begin(), ids.end());
    check(remove, "removing the containers of project " + project);
  }
  auto remove_all = [&](std::vector<std::string> argv, const std::vector<std::string>& names,
                        const std::string& what) {
    return [this, argv, &names, what]() mutable {
      if (!names.empty()) {
        argv.insert(argv.end(), names.begin(), names.end());
        check(argv, what);
      }
    };
  };
  all_at_once({
      remove_all({"docker", "network", "rm"}, networks,
                 "removing the networks of project " + project),
      remove_all({"docker", "volume", "rm", "-f"}, volumes,
                 "removing the volumes of project " + project),
      remove_all({"docker", "image", "rm"}, images,
                 "removing the images built for project " + project),
      [&] {
        check({"rm", "-rf", "--", fmt::format("{}/projects/{}", k_state_dir, project)},
              "removing the files of project " + project);
      },
  });
}

} // namespace sandboxer::drivers::compose_ssh
