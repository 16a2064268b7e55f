#include "drivers/compose-ssh/host.hpp"

#include <cstdlib>
#include <ctime>
#include <fmt/format.h>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <unistd.h>

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

// The readiness read: everything about every container in one `docker inspect`, a tab apart, so
// one remote command per look answers for all of them (docker ps says neither the start time nor,
// but in words, the health).
constexpr const char* k_inspect_format =
    "{{.Id}}\t{{index .Config.Labels \"com.docker.compose.service\"}}\t{{.State.Status}}\t"
    "{{with index .State \"Health\"}}{{.Status}}{{end}}\t{{.State.ExitCode}}\t"
    "{{.State.StartedAt}}\t{{index .Config.Labels \"com.docker.compose.version\"}}\t"
    "{{json .NetworkSettings.Ports}}";

// list by label: what a resource needs (the project, its state, its labels), in the same one
// `docker inspect` for all containers.
constexpr const char* k_labelled_format =
    "{{.Id}}\t{{index .Config.Labels \"com.docker.compose.service\"}}\t{{.State.Status}}\t"
    "{{index .Config.Labels \"com.docker.compose.version\"}}\t{{json .Config.Labels}}";

// The remote scripts below run as `sh -c SCRIPT sh ARGS...`: sandboxer's values only ever reach
// them as positional parameters (quoted by shell_words like any argv), never inside the script.
// `set -f`: the unquoted lists of ids and names split on blanks but never glob.

// Prints the project's containers in k_inspect_format, then "now=<the host's epoch time>": taken
// after the read, so that a container's age is what it is when the answer leaves the host.
// $1 project, $2 format.
#define SANDBOXER_READ_PART                                                                        \
  "ids=$(docker ps -aq --no-trunc --filter \"label=com.docker.compose.project=$1\") || exit\n"     \
  "[ -z \"$ids\" ] || docker inspect --format \"$2\" $ids || exit\n"                               \
  "echo \"now=$(date -u +%s.%N 2>/dev/null)\"\n"

constexpr const char* k_read_script = "set -f\n" SANDBOXER_READ_PART;

// The same for containers known by id ($2...): one docker command, not two. $1 format.
constexpr const char* k_reread_script = "set -f\n"
                                        "format=$1\n"
                                        "shift\n"
                                        "docker inspect --format \"$format\" \"$@\" || exit\n"
                                        "echo \"now=$(date -u +%s.%N 2>/dev/null)\"\n";

// The containers docker ps's filters ($2...) find, in the format $1: one round trip, not a listing
// and then an inspect.
constexpr const char* k_list_script =
    "set -f\n"
    "format=$1\n"
    "shift\n"
    "ids=$(docker ps -aq --no-trunc \"$@\") || exit\n"
    "[ -z \"$ids\" ] || docker inspect --format \"$format\" $ids\n";

// A create in one round trip: the project's files from stdin, which compose the host has (unless
// the caller knows: $3 is plugin, v1 or auto), `compose up` (its output on stderr, so that stdout
// holds only these lines), and the first readiness read. "stage=" lines say how far it got: the
// exit status is that stage's. $1 project, $2 format, $3 compose, then compose's arguments.
constexpr const char* k_up_script =
    "set -f\n"
    "echo stage=upload\n"
    "tar -x -f - --no-same-owner || exit\n"
    "kind=$3\n"
    "if [ \"$kind\" = auto ]; then\n"
    "  if docker compose version >/dev/null 2>&1; then kind=plugin; else kind=v1; fi\n"
    "fi\n"
    "echo \"compose=$kind\"\n"
    "echo stage=up\n"
    "p=$1 f=$2\n"
    "shift 3\n"
    "if [ \"$kind\" = plugin ]; then docker compose \"$@\"; else docker-compose \"$@\"; fi >&2 || "
    "exit\n"
    "echo stage=read\n"
    "set -- \"$p\" \"$f\"\n" SANDBOXER_READ_PART "echo stage=done\n";

// A pause or resume in one round trip, idempotent by docker ps's status filters (a repeat finds
// nothing left to do). freeze: `docker pause` of the running containers. stop: the paused ones
// unpaused (a frozen container sits out the whole grace of a stop), the mark written, then
// `compose stop` (its order, its grace). resume: the paused ones unpaused, `compose start` when
// something is stopped or the mark says a stop paused it (depends_on order), the mark removed,
// then the readiness read. "gone" when the project has no container. $1 step, $2 project, $3 the
// project's files, $4 format, $5 compose (plugin, v1 or auto), $6 grace seconds, $7 pause id,
// then compose's global options.
constexpr const char* k_pause_script =
    "set -f\n"
    "step=$1 p=$2 dir=$3 format=$4 kind=$5 grace=$6 id=$7\n"
    "shift 7\n"
    "f=\"label=com.docker.compose.project=$p\"\n"
    "all=$(docker ps -aq --no-trunc --filter \"$f\") || exit\n"
    "[ -n \"$all\" ] || { echo gone; exit 0; }\n"
    "if [ \"$step\" = freeze ]; then\n"
    "  ids=$(docker ps -q --no-trunc --filter \"$f\" --filter status=running) || exit\n"
    "  [ -z \"$ids\" ] || docker pause $ids >/dev/null || exit\n"
    "  exit 0\n"
    "fi\n"
    "ids=$(docker ps -q --no-trunc --filter \"$f\" --filter status=paused) || exit\n"
    "[ -z \"$ids\" ] || docker unpause $ids >/dev/null || exit\n"
    "verb=\n"
    "if [ \"$step\" = stop ]; then\n"
    "  printf '%s\\n' \"$id\" >\"$dir/paused\" || exit\n"
    "  verb=stop\n"
    "else\n"
    "  down=$(docker ps -aq --no-trunc --filter \"$f\" --filter status=exited --filter "
    "status=created) || exit\n"
    "  [ -z \"$down\" ] && [ ! -f \"$dir/paused\" ] || verb=start\n"
    "fi\n"
    "if [ -n \"$verb\" ]; then\n"
    "  [ ! -f \"$dir/env\" ] || set -- \"$@\" --env-file \"$dir/env\"\n"
    "  if [ \"$verb\" = stop ]; then set -- \"$@\" stop -t \"$grace\"; else set -- \"$@\" start; "
    "fi\n"
    "  if [ \"$kind\" = auto ]; then\n"
    "    if docker compose version >/dev/null 2>&1; then kind=plugin; else kind=v1; fi\n"
    "  fi\n"
    "  if [ \"$kind\" = plugin ]; then docker compose \"$@\"; else docker-compose \"$@\"; fi >&2 "
    "|| exit\n"
    "fi\n"
    "[ \"$step\" != stop ] || exit 0\n"
    "[ -z \"$verb\" ] || echo started\n"
    "rm -f -- \"$dir/paused\" || exit\n"
    "set -- \"$p\" \"$format\"\n" SANDBOXER_READ_PART;

// status: the project's containers in k_ps_format ($2), then "stopped-by-pause" when a pause
// stopped them (the mark in $3). $1 project.
constexpr const char* k_status_script =
    "docker ps -a --no-trunc --filter \"label=com.docker.compose.project=$1\" --format \"$2\" || "
    "exit\n"
    "[ ! -f \"$3/paused\" ] || echo stopped-by-pause\n";
#undef SANDBOXER_READ_PART

// A destroy in one round trip: the containers stopped (after the grace) and removed with their
// anonymous volumes, then the networks (one in use cannot be removed), volumes and images each
// listed and removed at once with the others and with the project's files. A step that fails
// prints "failed=<step>" and its words go to stderr. $1 project, $2 grace seconds, $3 directory.
// When $4 (a sandbox id) is given, it also lists the containers that still carry that id (what the
// core asks right after a destroy), each line "left=" and k_labelled_format ($5), then "listed".
constexpr const char* k_tear_down_script =
    "set -f\n"
    "f=\"label=com.docker.compose.project=$1\"\n"
    "ids=$(docker ps -aq --no-trunc --filter \"$f\") || { echo failed=containers; exit 1; }\n"
    "if [ -n \"$ids\" ]; then\n"
    // A paused (frozen) container would sit out the whole grace: thawed first.
    "  p=$(docker ps -q --no-trunc --filter \"$f\" --filter status=paused) && { [ -z \"$p\" ] "
    "|| docker unpause $p >/dev/null 2>&1; }\n"
    // A failure to stop is met by rm -f.
    "  [ \"$2\" -le 0 ] || docker stop -t \"$2\" $ids >/dev/null 2>&1\n"
    "  docker rm -f -v $ids >/dev/null || { echo failed=containers; exit 1; }\n"
    "fi\n"
    "{ n=$(docker network ls -q --filter \"$f\") && { [ -z \"$n\" ] || docker network rm $n "
    ">/dev/null; } || echo failed=networks; } &\n"
    "{ v=$(docker volume ls -q --filter \"$f\") && { [ -z \"$v\" ] || docker volume rm -f $v "
    ">/dev/null; } || echo failed=volumes; } &\n"
    // Images compose built are named after the project (v1 P_service, v2 P-service); removing
    // the name only untags an image that something else (a snapshot) still names.
    "{ i=$(docker image ls --format '{{.Repository}}:{{.Tag}}' --filter \"reference=$1_*\" "
    "--filter \"reference=$1-*\") && { [ -z \"$i\" ] || docker image rm $i >/dev/null; } || "
    "echo failed=images; } &\n"
    // The project's containers are gone: what still carries the id is listed meanwhile.
    "[ -z \"$4\" ] || { ids=$(docker ps -aq --no-trunc --filter label=com.docker.compose.project "
    "--filter \"label=sandboxer.id=$4\") && { [ -z \"$ids\" ] || docker inspect --format "
    "\"left=$5\" $ids; } && echo listed; } &\n"
    "rm -rf -- \"$3\" || echo failed=files\n"
    "wait\n";

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

Host::Host(const Ssh& ssh, std::chrono::milliseconds command_timeout,
           std::filesystem::path data_dir)
    : m_ssh(ssh), m_timeout(command_timeout), m_data_dir(std::move(data_dir)) {}

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

std::vector<std::string> compose_argv(ComposeKind kind) {
  return kind == ComposeKind::plugin ? std::vector<std::string>{"docker", "compose"}
                                     : std::vector<std::string>{"docker-compose"};
}

namespace {

std::mutex g_compose_mutex;
std::map<std::string, ComposeKind>& known_composes() {
  static std::map<std::string, ComposeKind> known;
  return known;
}

std::optional<ComposeKind> compose_kind_of(std::string word) {
  while (!word.empty() && (word.back() == '\n' || word.back() == '\r' || word.back() == ' ')) {
    word.pop_back();
  }
  if (word == "plugin") {
    return ComposeKind::plugin;
  }
  if (word == "v1") {
    return ComposeKind::v1;
  }
  return std::nullopt;
}

// Seconds since the epoch of docker's "2024-05-01T10:00:00.123456789Z" (always UTC).
std::optional<double> epoch_of(const std::string& stamp) {
  std::tm tm{};
  int consumed = 0;
  if (std::sscanf(stamp.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &consumed) != 6 ||
      tm.tm_year < 1971) {
    return std::nullopt; // "0001-01-01T00:00:00Z": never started
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  double fraction = 0;
  if (stamp[consumed] == '.') {
    fraction = std::strtod(stamp.c_str() + consumed, nullptr);
  }
  return static_cast<double>(::timegm(&tm)) + fraction;
}

} // namespace

std::filesystem::path Host::compose_cache_file() const {
  if (m_data_dir.empty()) {
    return {};
  }
  // One file per user@host:port, its name spelled with safe characters only.
  std::string name = "compose.";
  for (unsigned char c : where()) {
    if (std::isalnum(c) || c == '.' || c == '-' || c == '_' || c == '@') {
      name.push_back(static_cast<char>(c));
    } else {
      name += fmt::format("%{:02x}", c);
    }
  }
  return m_data_dir / name;
}

std::optional<ComposeKind> Host::known_compose() const {
  std::lock_guard lock(g_compose_mutex);
  if (auto it = known_composes().find(where()); it != known_composes().end()) {
    return it->second;
  }
  auto file = compose_cache_file();
  if (file.empty()) {
    return std::nullopt;
  }
  std::ifstream in(file);
  std::string word;
  if (!in || !std::getline(in, word)) {
    return std::nullopt;
  }
  auto kind = compose_kind_of(word);
  if (kind) {
    known_composes()[where()] = *kind;
  }
  return kind;
}

void Host::remember_compose(ComposeKind kind) const {
  std::lock_guard lock(g_compose_mutex);
  known_composes()[where()] = kind;
  auto file = compose_cache_file();
  if (file.empty()) {
    return;
  }
  // Written aside and renamed: a concurrent reader sees the old answer or the new, never half.
  auto temporary = file;
  temporary += fmt::format(".{}.tmp", ::getpid());
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << (kind == ComposeKind::plugin ? "plugin" : "v1") << "\n";
    if (!out) {
      std::error_code ignored;
      std::filesystem::remove(temporary, ignored);
      return; // only a cache: the next command asks the host again
    }
  }
  std::error_code ec;
  std::filesystem::rename(temporary, file, ec);
  if (ec) {
    std::filesystem::remove(temporary, ec);
  }
}

void Host::forget_compose() const {
  std::lock_guard lock(g_compose_mutex);
  known_composes().erase(where());
  auto file = compose_cache_file();
  if (!file.empty()) {
    std::error_code ignored;
    std::filesystem::remove(file, ignored);
  }
}

Reading parse_reading(const std::string& out) {
  Reading reading;
  std::optional<double> now;
  std::optional<double> youngest; // the latest start of a running container
  bool all_running = true;
  for (const auto& line : split(out, '\n')) {
    if (line.starts_with("now=")) {
      char* end = nullptr;
      const double value = std::strtod(line.c_str() + 4, &end);
      if (end != line.c_str() + 4) {
        now = value;
      }
      continue;
    }
    auto fields = split(line, '\t');
    if (fields.size() < 7 || fields[0].empty()) {
      continue;
    }
    for (auto& field : fields) {
      if (field == "<no value>") {
        field.clear(); // a label the container lacks
      }
    }
    Container container{fields[0], fields[1], fields[2], "", fields[6], {}, {}};
    if (fields.size() > 7) {
      container.ports_json = fields[7];
    }
    const std::string& health = fields[3];
    // docker ps's words for the same facts, which Container reads.
    if (container.state == "running") {
      container.status = "Up";
      if (health == "healthy" || health == "unhealthy") {
        container.status += " (" + health + ")";
      } else if (health == "starting") {
        container.status += " (health: starting)";
      }
      auto started = epoch_of(fields[5]);
      if (!started) {
        all_running = false;
      } else if (!youngest || *started > *youngest) {
        youngest = started;
      }
    } else {
      all_running = false;
      container.status =
          container.state == "exited" ? fmt::format("Exited ({})", fields[4]) : container.state;
    }
    reading.containers.push_back(std::move(container));
  }
  if (all_running && now && youngest && !reading.containers.empty()) {
    reading.all_up_for = std::chrono::milliseconds(
        static_cast<long long>(std::max(0.0, (*now - *youngest) * 1000.0)));
  }
  return reading;
}

Reading Host::read_project(const std::string& project, const std::vector<Container>& known) const {
  if (!known.empty()) {
    std::vector<std::string> argv = {"sh", "-c", k_reread_script, "sh", k_inspect_format};
    for (const auto& container : known) {
      argv.push_back(container.id);
    }
    if (auto result = run(argv); result.exit_code == 0) {
      return parse_reading(result.out);
    }
    // One of them is gone: the full read says what the project has now.
  }
  auto out = check({"sh", "-c", k_read_script, "sh", project, k_inspect_format},
                   "reading the containers of project " + project);
  return parse_reading(out);
}

UpResult Host::upload_and_up(const std::vector<TarEntry>& entries, const std::string& project,
                             const std::vector<std::string>& compose_args,
                             std::chrono::milliseconds timeout) const {
  UpResult up;
  auto known = known_compose();
  up.kind_was_cached = known.has_value();
  RemoteCall call;
  call.argv = {"sh",
               "-c",
               k_up_script,
               "sh",
               project,
               k_inspect_format,
               known ? (*known == ComposeKind::plugin ? "plugin" : "v1") : "auto"};
  call.argv.insert(call.argv.end(), compose_args.begin(), compose_args.end());
  call.timeout = timeout;
  call.stdin_data = tar_archive(entries);
  auto result = m_ssh.run(call);
  up.exit_code = result.exit_code;
  std::string rest;
  for (const auto& line : split(result.out, '\n')) {
    if (line == "stage=upload") {
      up.stage = UpResult::Stage::upload;
    } else if (line == "stage=up") {
      up.stage = UpResult::Stage::up;
    } else if (line == "stage=read") {
      up.stage = UpResult::Stage::read;
    } else if (line == "stage=done") {
      up.stage = UpResult::Stage::done;
    } else if (line.starts_with("compose=")) {
      up.kind = compose_kind_of(line.substr(8)).value_or(ComposeKind::v1);
    } else if (up.stage == UpResult::Stage::read) {
      rest += line + "\n";
    }
  }
  // Compose's own output went to stderr (stdout holds only the script's lines).
  up.output = result.err;
  if (up.stage == UpResult::Stage::done) {
    up.reading = parse_reading(rest);
  }
  return up;
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

std::vector<Container> parse_labelled(const std::string& listing) {
  std::vector<Container> containers;
  for (const auto& line : split(listing, '\n')) {
    auto fields = split(line, '\t');
    if (fields.size() < 5 || fields[0].empty()) {
      continue;
    }
    Container container{fields[0], fields[1], fields[2], fields[2], fields[3], {}};
    for (auto* field : {&container.service, &container.compose_version}) {
      if (*field == "<no value>") {
        field->clear();
      }
    }
    // JSON escapes a tab in a label's value: the last field is the whole of the labels.
    auto parsed = nlohmann::json::parse(fields[4], nullptr, false);
    if (parsed.is_object()) {
      for (const auto& [key, value] : parsed.items()) {
        if (value.is_string()) {
          container.labels[key] = value.get<std::string>();
        }
      }
    }
    containers.push_back(std::move(container));
  }
  return containers;
}

std::vector<Container> Host::containers_labelled(const Labels& selector) const {
  std::vector<std::string> argv = {"sh",
                                   "-c",
                                   k_list_script,
                                   "sh",
                                   k_labelled_format,
                                   "--filter",
                                   std::string("label=") + k_project_label};
  for (const auto& [key, value] : selector) {
    argv.insert(argv.end(), {"--filter", fmt::format("label={}={}", key, value)});
  }
  return parse_labelled(check(argv, "listing sandboxer's containers"));
}

std::vector<std::string> pause_argv(const PauseCall& call) {
  const std::string dir = fmt::format("{}/projects/{}", k_state_dir, call.project);
  const char* step = call.step == PauseStep::freeze ? "freeze"
                     : call.step == PauseStep::stop ? "stop"
                                                    : "resume";
  const char* compose = !call.compose                          ? "auto"
                        : *call.compose == ComposeKind::plugin ? "plugin"
                                                               : "v1";
  return {"sh",
          "-c",
          k_pause_script,
          "sh",
          step,
          call.project,
          dir,
          k_inspect_format,
          compose,
          std::to_string(call.grace.count()),
          call.pause_id,
          "-p",
          call.project,
          "--project-directory",
          call.project_dir.empty() ? dir : call.project_dir,
          "-f",
          dir + "/compose.yml",
          "-f",
          dir + "/sandboxer.override.yml"};
}

std::optional<Reading> Host::pause_step(const PauseCall& call,
                                        std::chrono::milliseconds timeout) const {
  RemoteCall remote;
  remote.argv = pause_argv(call);
  remote.timeout = timeout;
  auto result = m_ssh.run(remote);
  const char* what = call.step == PauseStep::freeze ? "pausing (docker pause)"
                     : call.step == PauseStep::stop ? "pausing (compose stop)"
                                                    : "resuming";
  if (result.exit_code != 0) {
    throw DriverError(Kind::error, fmt::format("compose-ssh: {} project {} on {} failed: {}", what,
                                               call.project, where(), last_lines(result.err, 3)));
  }
  for (const auto& line : split(result.out, '\n')) {
    if (line == "gone") {
      return std::nullopt;
    }
  }
  if (call.step != PauseStep::resume) {
    return Reading{};
  }
  Reading reading = parse_reading(result.out);
  for (const auto& line : split(result.out, '\n')) {
    reading.started = reading.started || line == "started";
  }
  return reading;
}

std::vector<std::string> status_argv(const std::string& project) {
  return {"sh",
          "-c",
          k_status_script,
          "sh",
          project,
          k_ps_format,
          fmt::format("{}/projects/{}", k_state_dir, project)};
}

ProjectStatus Host::project_status(const std::string& project) const {
  auto listing = check(status_argv(project), "listing the containers of project " + project);
  ProjectStatus status;
  status.containers = parse_containers(listing, false);
  for (const auto& line : split(listing, '\n')) {
    status.stopped_by_pause = status.stopped_by_pause || line == "stopped-by-pause";
  }
  return status;
}

std::optional<std::vector<Container>> Host::tear_down(const std::string& project,
                                                      std::chrono::seconds grace,
                                                      const std::string& then_list_id) const {
  RemoteCall call;
  call.argv = {"sh",
               "-c",
               k_tear_down_script,
               "sh",
               project,
               std::to_string(grace.count()),
               fmt::format("{}/projects/{}", k_state_dir, project),
               then_list_id,
               k_labelled_format};
  call.timeout = m_timeout + grace;
  auto result = m_ssh.run(call);
  static const std::map<std::string, std::string> k_steps = {
      {"containers", "removing the containers of project "},
      {"networks", "removing the networks of project "},
      {"volumes", "removing the volumes of project "},
      {"images", "removing the images built for project "},
      {"files", "removing the files of project "}};
  std::vector<std::string> failed;
  std::string left;
  bool listed = false;
  for (const auto& line : split(result.out, '\n')) {
    if (line.starts_with("left=")) {
      left += line.substr(5) + "\n";
    } else if (line == "listed") {
      listed = true;
    } else if (line.starts_with("failed=")) {
      auto step = k_steps.find(line.substr(7));
      failed.push_back(
          (step == k_steps.end() ? "removing " + line.substr(7) + " of project " : step->second) +
          project);
    }
  }
  if (failed.empty() && result.exit_code != 0) {
    failed.push_back("removing project " + project);
  }
  if (!failed.empty()) {
    throw DriverError(Kind::error,
                      fmt::format("compose-ssh: {} on {} failed: {}", fmt::join(failed, ", "),
                                  where(), last_lines(result.err, 3)));
  }
  if (!listed) {
    return std::nullopt;
  }
  return parse_labelled(left);
}

} // namespace sandboxer::drivers::compose_ssh
