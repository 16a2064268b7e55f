#include "drivers/docker/engine_api.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fmt/format.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sandboxer/error.hpp>
#include <sandboxer/interrupt.hpp>

#include "drivers/docker/log_lines.hpp"

namespace sandboxer::drivers::docker {
namespace {

using nlohmann::json;
using Kind = DriverError::Kind;

} // namespace

std::string url_encode(std::string_view text) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

namespace {

std::string engine_message(const http::Response& response) {
  auto body = json::parse(response.body, nullptr, false);
  if (body.is_object() && body.contains("message") && body["message"].is_string()) {
    return body["message"].get<std::string>();
  }
  std::string text = response.body.substr(0, 200);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) {
    text.pop_back();
  }
  return text.empty() ? fmt::format("HTTP {}", response.status) : text;
}

// The engine's JSON answer. Anything else (a proxy's HTML error page, a truncated body) is a
// backend error (exit 4) naming the call, never an internal error.
// How long the engine may take to answer an exec's start (its headers): the command then runs
// as long as it runs. A busy engine answers in milliseconds; a hung one never does.
constexpr std::chrono::seconds k_exec_answer_timeout{60};

json answer_of(const http::Response& response, std::string_view call) {
  auto body = json::parse(response.body, nullptr, false);
  if (body.is_discarded()) {
    std::string text = response.body.substr(0, 100);
    throw DriverError(Kind::error,
                      fmt::format("docker: {}: the engine's answer (HTTP {}) is not "
                                  "JSON: {}",
                                  call, response.status, text.empty() ? "(empty)" : text));
  }
  return body;
}

// The "Id" of an answer to a create, commit or exec.
std::string id_in(const http::Response& response, std::string_view call) {
  json body = answer_of(response, call);
  if (!body.is_object() || !body.contains("Id") || !body["Id"].is_string() ||
      body["Id"].get<std::string>().empty()) {
    throw DriverError(Kind::error, fmt::format("docker: {}: the engine's answer has no \"Id\": {}",
                                               call, body.dump().substr(0, 100)));
  }
  return body["Id"].get<std::string>();
}

} // namespace

std::string Endpoint::describe() const {
  return socket_path ? "unix://" + *socket_path : "tcp://" + base_url.substr(7);
}

std::string engine_address(const std::optional<std::string>& host) {
  std::string value = host.value_or("");
  if (value.empty()) {
    const char* env = std::getenv("DOCKER_HOST");
    value = env && *env ? env : "unix:///var/run/docker.sock";
  }
  if (value.starts_with("http://")) {
    value = "tcp://" + value.substr(7); // how records before 0.2 wrote a tcp engine
  }
  return value;
}

Endpoint resolve_endpoint(const std::string& address) {
  if (address.starts_with("unix://")) {
    return {address.substr(7), "http://docker"};
  }
  if (address.starts_with("tcp://")) {
    const char* tls = std::getenv("DOCKER_TLS_VERIFY");
    if (tls && *tls && std::string(tls) != "0") {
      throw DriverError(Kind::unsupported,
                        fmt::format("docker: DOCKER_TLS_VERIFY is set for {}, and sandboxer does "
                                    "not speak TLS to the engine yet; use a unix socket or an "
                                    "ssh tunnel to one",
                                    address));
    }
    return {std::nullopt, "http://" + address.substr(6)};
  }
  throw DriverError(Kind::invalid_spec,
                    fmt::format("docker: cannot use DOCKER_HOST \"{}\": expected unix:///path or "
                                "tcp://host:port",
                                address));
}

EngineApi::EngineApi(Endpoint endpoint, http::Transport& transport)
    : m_endpoint(std::move(endpoint)), m_transport(transport) {}

http::Response EngineApi::send(const http::Request& request, const std::string& method,
                               const std::string& path) {
  http::Response response;
  try {
    response = m_transport.send(request);
  } catch (const DriverError& e) {
    if (m_endpoint.socket_path && e.kind() == Kind::unavailable) {
      if (access(m_endpoint.socket_path->c_str(), F_OK) == 0 &&
          access(m_endpoint.socket_path->c_str(), R_OK | W_OK) != 0) {
        throw DriverError(Kind::auth,
                          fmt::format("docker: permission denied on {}: add this user to the "
                                      "docker group (then log in again) or run as root",
                                      *m_endpoint.socket_path));
      }
      throw DriverError(Kind::error,
                        fmt::format("docker: the daemon is not running (nothing answers on {}): "
                                    "start it (systemctl start docker, or dockerd &) or set "
                                    "DOCKER_HOST",
                                    m_endpoint.describe()));
    }
    if (e.kind() == Kind::timeout && request.stall_timeout) {
      // A stream: what stopped it (curl's words say whether it stalled) is the news.
      throw DriverError(Kind::timeout, fmt::format("docker: {} {} on {} timed out: {}", method,
                                                   path, m_endpoint.describe(), e.what()));
    }
    if (e.kind() == Kind::timeout) {
      throw DriverError(Kind::timeout,
                        fmt::format("docker: {} {} timed out after {} s on {}", method, path,
                                    request.timeout.count() / 1000, m_endpoint.describe()));
    }
    throw DriverError(e.kind(), fmt::format("docker: {}", e.what()));
  }
  reject_old_engine(response);
  return response;
}

http::Response EngineApi::call(const std::string& method, const std::string& path,
                               const std::optional<json>& body, std::chrono::milliseconds timeout) {
  http::Request request;
  request.method = method;
  request.url = fmt::format("{}/v{}{}", m_endpoint.base_url, k_api_version, path);
  request.unix_socket = m_endpoint.socket_path;
  request.timeout = timeout;
  if (body) {
    request.body = body->dump();
    request.headers.emplace_back("Content-Type", "application/json");
  }
  http::Response response = send(request, method, path);
  if (response.status == 404) {
    // The engine's 404s always carry {"message": ...}. Another server (a web server, a registry
    // at DOCKER_HOST) answers 404 to everything, which must not read as "the sandbox is gone".
    auto answer = json::parse(response.body, nullptr, false);
    if (!answer.is_object() || !answer.contains("message")) {
      // `unsupported`, not `error`: such a server made nothing, so a create has nothing to undo
      // and its message stays one line.
      throw DriverError(Kind::unsupported,
                        fmt::format("docker: {} answered {} {} with HTTP 404 and no engine "
                                    "message: it is not a Docker Engine API (check DOCKER_HOST "
                                    "or the profile's docker.host)",
                                    m_endpoint.describe(), method, path));
    }
  }
  return response;
}

void EngineApi::reject_old_engine(const http::Response& response) const {
  // Every path carries /v1.41: an engine older than that answers any of them with 400 "client
  // version 1.41 is too new. Maximum supported API version is 1.40". So no GET /version up front:
  // the first call of each operation finds out, for free when the engine is recent enough.
  if (response.status != 400) {
    return;
  }
  std::string message = engine_message(response);
  if (message.find("client version") == std::string::npos ||
      message.find("too new") == std::string::npos) {
    return;
  }
  std::string speaks;
  if (auto at = message.find("Maximum supported API version is "); at != std::string::npos) {
    speaks = message.substr(at + 33);
    while (!speaks.empty() && (speaks.back() == '.' || speaks.back() == ' ')) {
      speaks.pop_back();
    }
  }
  throw DriverError(Kind::unsupported,
                    fmt::format("docker: the engine on {} speaks API {}, older than {} which "
                                "sandboxer needs (Docker 20.10 or later): upgrade docker",
                                m_endpoint.describe(),
                                speaks.empty() ? "below " + std::string(k_api_version) : speaks,
                                k_api_version));
}

void EngineApi::fail(const std::string& what, const http::Response& response) const {
  std::string message = engine_message(response);
  Kind kind = http::kind_of_status(response.status);
  std::string hint;
  if (message.find("permission denied") != std::string::npos && response.status == 403) {
    hint = " (the engine refused: check its authorization plugin)";
  }
  throw DriverError(kind, fmt::format("docker: {}: {}{}", what, message, hint));
}

std::optional<json> EngineApi::inspect_image(const std::string& image) {
  auto response = call("GET", "/images/" + url_encode(image) + "/json");
  if (response.status == 404) {
    return std::nullopt;
  }
  if (response.status != 200) {
    fail("cannot inspect image " + image, response);
  }
  return answer_of(response, "inspect image");
}

void EngineApi::pull_image(const std::string& image, Progress& progress) {
  // "name:tag" or "name@digest"; a name without either means :latest, as the docker CLI does.
  std::string from = image, tag;
  auto at = image.find('@');
  auto colon = image.rfind(':');
  if (at == std::string::npos && colon != std::string::npos &&
      image.find('/', colon) == std::string::npos) {
    from = image.substr(0, colon);
    tag = image.substr(colon + 1);
  } else if (at == std::string::npos) {
    tag = "latest";
  }
  http::Request request;
  request.method = "POST";
  request.url =
      fmt::format("{}/v{}/images/create?fromImage={}{}", m_endpoint.base_url, k_api_version,
                  url_encode(from), tag.empty() ? "" : "&tag=" + url_encode(tag));
  request.unix_socket = m_endpoint.socket_path;
  request.timeout = std::chrono::minutes(30);
  std::string pending, last_error;
  request.on_body = [&](std::string_view chunk) {
    pending.append(chunk);
    for (auto newline = pending.find('\n'); newline != std::string::npos;
         newline = pending.find('\n')) {
      auto line = json::parse(pending.substr(0, newline), nullptr, false);
      pending.erase(0, newline + 1);
      if (!line.is_object()) {
        continue;
      }
      if (line.contains("error")) {
        last_error = line["error"].is_string() ? line["error"].get<std::string>() : line.dump();
      } else if (line.contains("status")) {
        std::string text = line.value("status", "");
        if (line.contains("progress") && line["progress"].is_string()) {
          text += " " + line["progress"].get<std::string>();
        }
        progress.update(fmt::format("pull {}: {}", image, text));
      }
    }
    return true;
  };
  http::Response response;
  try {
    response = m_transport.send(request);
  } catch (const DriverError& e) {
    throw DriverError(e.kind(), fmt::format("docker: pulling {}: {}", image, e.what()));
  }
  reject_old_engine(response);
  if (response.status != 200) {
    response.body = response.body.empty() ? pending : response.body;
    fail("cannot pull " + image, response);
  }
  if (!last_error.empty()) {
    throw DriverError(Kind::error, fmt::format("docker: cannot pull {}: {}", image, last_error));
  }
}

std::optional<std::string> EngineApi::create_container(const std::string& name, const json& body) {
  auto response = call("POST", "/containers/create?name=" + url_encode(name), body);
  // 404 is also a missing network: only "No such image" means the image.
  if (response.status == 404 &&
      engine_message(response).find("No such image") != std::string::npos) {
    return std::nullopt;
  }
  if (response.status == 409) {
    throw DriverError(Kind::conflict,
                      fmt::format("docker: a container named {} already exists: {} (remove it "
                                  "with docker rm -f {}, or reap --orphans)",
                                  name, engine_message(response), name));
  }
  if (response.status != 201) {
    fail("cannot create container " + name, response);
  }
  return id_in(response, "create container");
}

void EngineApi::start_container(const std::string& id) {
  auto response = call("POST", "/containers/" + url_encode(id) + "/start");
  if (response.status != 204 && response.status != 304) {
    fail("cannot start container " + id.substr(0, 12), response);
  }
}

std::optional<json> EngineApi::inspect_container(const std::string& id) {
  auto response = call("GET", "/containers/" + url_encode(id) + "/json");
  if (response.status == 404) {
    return std::nullopt;
  }
  if (response.status != 200) {
    fail("cannot inspect container " + id.substr(0, 12), response);
  }
  return answer_of(response, "inspect container");
}

void EngineApi::stop_container(const std::string& id, int grace_seconds) {
  auto response =
      call("POST", fmt::format("/containers/{}/stop?t={}", url_encode(id), grace_seconds),
           std::nullopt, std::chrono::seconds(grace_seconds + 30));
  if (response.status == 404) {
    throw DriverError(Kind::not_found, fmt::format("docker: container {} is gone", id));
  }
  if (response.status != 204 && response.status != 304) {
    fail("cannot stop container " + id.substr(0, 12), response);
  }
}

void EngineApi::pause_container(const std::string& id) {
  auto response = call("POST", "/containers/" + url_encode(id) + "/pause");
  if (response.status == 404) {
    throw DriverError(Kind::not_found, fmt::format("docker: container {} is gone", id));
  }
  if (response.status == 409) {
    // Also the answer for a paused container: what it is now says whether that is done.
    auto inspect = inspect_container(id);
    if (inspect && (*inspect)["State"].value("Paused", false)) {
      return;
    }
  }
  if (response.status != 204) {
    fail("cannot pause container " + id.substr(0, 12), response);
  }
}

bool EngineApi::unpause_container(const std::string& id) {
  auto response = call("POST", "/containers/" + url_encode(id) + "/unpause");
  if (response.status == 404) {
    throw DriverError(Kind::not_found, fmt::format("docker: container {} is gone", id));
  }
  // Not frozen (running, created, exited): 409 in the API's documents, 500 from engines that say
  // "Container ... is not paused" (20.10).
  const std::string message =
      response.status == 409 || response.status == 500 ? engine_message(response) : std::string();
  if (response.status == 409 || message.find("not paused") != std::string::npos ||
      message.find("not running") != std::string::npos) {
    return false;
  }
  if (response.status != 204) {
    fail("cannot unpause container " + id.substr(0, 12), response);
  }
  return true;
}

bool EngineApi::rename_container(const std::string& id, const std::string& new_name) {
  auto response = call(
      "POST", fmt::format("/containers/{}/rename?name={}", url_encode(id), url_encode(new_name)));
  if (response.status == 404) {
    return false;
  }
  if (response.status == 409) {
    throw DriverError(Kind::conflict,
                      fmt::format("docker: a container named {} already exists: {} (remove it "
                                  "with docker rm -f {})",
                                  new_name, engine_message(response), new_name));
  }
  if (response.status != 204) {
    fail("cannot rename container " + id.substr(0, 12), response);
  }
  return true;
}

bool EngineApi::remove_container(const std::string& id, bool force) {
  auto response =
      call("DELETE", fmt::format("/containers/{}?v=1&force={}", url_encode(id), force ? 1 : 0));
  if (response.status == 404) {
    return false;
  }
  // 409 "removal already in progress" means someone else is finishing the job.
  if (response.status == 409 &&
      engine_message(response).find("already in progress") != std::string::npos) {
    return true;
  }
  if (response.status != 204) {
    fail("cannot remove container " + id.substr(0, 12), response);
  }
  return true;
}

json EngineApi::list_containers(const json& label_filters) {
  json filters = {{"label", json::array()}};
  for (const auto& [key, value] : label_filters.items()) {
    filters["label"].push_back(key + "=" + value.get<std::string>());
  }
  auto response = call("GET", "/containers/json?all=1&filters=" + url_encode(filters.dump()));
  if (response.status != 200) {
    fail("cannot list containers", response);
  }
  return answer_of(response, "list containers");
}

std::string EngineApi::commit(const std::string& container, const std::string& repo,
                              const std::string& tag, const json& labels) {
  json config = {{"Labels", labels}};
  auto response = call("POST",
                       fmt::format("/commit?container={}&repo={}&tag={}&pause=1",
                                   url_encode(container), url_encode(repo), url_encode(tag)),
                       config, std::chrono::minutes(30));
  if (response.status == 404) {
    throw DriverError(Kind::not_found, fmt::format("docker: container {} is gone", container));
  }
  if (response.status != 201) {
    fail("cannot commit container " + container.substr(0, 12), response);
  }
  return id_in(response, "commit");
}

bool EngineApi::remove_image(const std::string& image) {
  auto response = call("DELETE", "/images/" + url_encode(image));
  if (response.status == 404) {
    return false;
  }
  if (response.status != 200) {
    fail("cannot remove image " + image, response);
  }
  return true;
}

std::string EngineApi::create_exec(const std::string& container, const json& body) {
  auto response = call("POST", "/containers/" + url_encode(container) + "/exec", body);
  if (response.status == 404) {
    throw DriverError(Kind::not_found, fmt::format("docker: container {} is gone", container));
  }
  if (response.status == 409) {
    fail("container " + container.substr(0, 12) + " is not running", response);
  }
  if (response.status != 201) {
    fail("cannot create an exec in " + container.substr(0, 12), response);
  }
  return id_in(response, "create exec");
}

void EngineApi::container_logs(const std::string& id, const LogsRequest& logs, bool tty,
                               LogSink& sink) {
  std::string query = "stdout=1&stderr=1&timestamps=1";
  if (logs.follow) {
    query += "&follow=1";
  }
  if (logs.since) {
    query += fmt::format("&since={}", logs.since->time_since_epoch().count());
  }
  if (logs.tail) {
    query += fmt::format("&tail={}", *logs.tail);
  }
  http::Request request;
  request.url = fmt::format("{}/v{}/containers/{}/logs?{}", m_endpoint.base_url, k_api_version,
                            url_encode(id), query);
  request.unix_socket = m_endpoint.socket_path;
  // A followed container may stay quiet for as long as it lives: no deadline on the stream, but
  // the engine must answer within the exec's bound, and a signal stops it (curl's progress
  // callback looks at every tick, output or not).
  request.timeout = logs.follow ? std::chrono::milliseconds(std::chrono::hours(24 * 7))
                                : std::chrono::milliseconds(std::chrono::seconds(60));
  request.answer_timeout = k_exec_answer_timeout;
  TimestampedLines lines(sink);
  StreamDemuxer demuxer(lines);
  // on_body runs before the status is known to us: an error is the engine's JSON ({"message":
  // ...}), while a log stream starts with a frame header (1 or 2) or, raw, with a timestamp.
  std::optional<bool> is_error;
  std::string error_body;
  request.on_body = [&](std::string_view chunk) {
    if (!is_error) {
      is_error = !chunk.empty() && chunk.front() == '{';
    }
    if (*is_error) {
      error_body.append(chunk.substr(0, 4096 - std::min<size_t>(error_body.size(), 4096)));
    } else if (tty) {
      lines.out(chunk);
    } else {
      demuxer.feed(chunk);
    }
    return true;
  };
  auto response = m_transport.send(request);
  if (response.status != 200) {
    response.body = error_body;
  }
  if (response.status == 404) {
    throw DriverError(Kind::not_found, fmt::format("docker: container {} is gone", id));
  }
  reject_old_engine(response);
  if (response.status != 200) {
    fail("cannot read the logs of container " + id.substr(0, 12), response);
  }
  lines.finish();
}

void EngineApi::start_exec(const std::string& exec_id, bool tty, ExecIo& io) {
  http::Request request;
  request.method = "POST";
  request.url =
      fmt::format("{}/v{}/exec/{}/start", m_endpoint.base_url, k_api_version, url_encode(exec_id));
  request.unix_socket = m_endpoint.socket_path;
  request.headers.emplace_back("Content-Type", "application/json");
  request.body = json{{"Detach", false}, {"Tty", tty}}.dump();
  // A command may run for as long as the sandbox lives; the engine's answer to the start may not.
  request.timeout = std::chrono::hours(24 * 7);
  request.answer_timeout = k_exec_answer_timeout;
  StreamDemuxer demuxer(io);
  request.on_body = [&](std::string_view chunk) {
    if (tty) {
      io.out(chunk);
    } else {
      demuxer.feed(chunk);
    }
    return true;
  };
  auto response = m_transport.send(request);
  reject_old_engine(response);
  if (response.status != 200 && response.status != 101) {
    fail("cannot start exec", response);
  }
}

void EngineApi::start_exec_attached(const std::string& exec_id, bool tty, ExecIo& io,
                                    const std::function<void(int)>& forward_signal) {
  std::optional<TerminalSize> size = tty ? io.terminal_size() : std::nullopt;
  http::Request request;
  request.method = "POST";
  request.url =
      fmt::format("{}/v{}/exec/{}/start", m_endpoint.base_url, k_api_version, url_encode(exec_id));
  request.unix_socket = m_endpoint.socket_path;
  request.headers = {
      {"Content-Type", "application/json"}, {"Connection", "Upgrade"}, {"Upgrade", "tcp"}};
  request.body = json{{"Detach", false}, {"Tty", tty}}.dump();
  request.answer_timeout = k_exec_answer_timeout;
  auto stream = hijack(request);
  StreamDemuxer demuxer(io);
  auto deliver = [&](std::string_view bytes) { tty ? io.out(bytes) : demuxer.feed(bytes); };
  if (!stream->initial.empty()) {
    deliver(stream->initial);
  }
  // The exec's terminal starts at 0x0: API 1.41 has no initial size (ConsoleSize in the exec
  // bodies is API 1.42, dropped by the engine on a /v1.41 path), only resizes. The engine answers
  // the upgrade and then starts the process, and refuses a resize until it runs: the first one is
  // retried after 10, 20, 30... ms (as the docker CLI does, which gives up after 10 tries, ~0.5 s;
  // here the gaps stop growing at 100 ms and the tries go on for ~2.5 s, for a busy engine),
  // while the stream is served.
  constexpr int k_max_resize_attempts = 30;
  int resize_attempts = 0;
  auto next_resize = std::chrono::steady_clock::now();
  auto try_initial_resize = [&] {
    if (!size || resize_attempts >= k_max_resize_attempts ||
        std::chrono::steady_clock::now() < next_resize) {
      return;
    }
    ++resize_attempts;
    if (resize_exec(exec_id, *size)) {
      size.reset();
    } else {
      next_resize = std::chrono::steady_clock::now() +
                    std::chrono::milliseconds(std::min(10 * resize_attempts, 100));
    }
  };
  try_initial_resize();
  int in_fd = io.stdin_fd();
  int winch_fd = tty ? io.resize_fd() : -1;
  int signal_fd = forward_signal ? interrupt::wake_fd() : -1;
  int signals_seen = interrupt::count();
  char buffer[65536];
  while (true) {
    pollfd fds[4] = {
        {stream->fd, POLLIN, 0}, {in_fd, POLLIN, 0}, {winch_fd, POLLIN, 0}, {signal_fd, POLLIN, 0}};
    int timeout = -1;
    if (size && resize_attempts < k_max_resize_attempts) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                      next_resize - std::chrono::steady_clock::now())
                      .count();
      timeout = static_cast<int>(std::max<long long>(left, 0));
    }
    // poll() skips entries with a negative fd.
    int ready = poll(fds, 4, timeout);
    if (ready < 0) {
      if (errno == EINTR) {
        continue;
      }
      break;
    }
    try_initial_resize();
    if (signal_fd >= 0 && (fds[3].revents & POLLIN)) {
      interrupt::drain_wake_fd();
      if (interrupt::count() != signals_seen) {
        signals_seen = interrupt::count();
        forward_signal(interrupt::last_signal());
      }
    }
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t n = read(stream->fd, buffer, sizeof buffer);
      if (n <= 0) {
        break; // the command ended and the engine closed the stream
      }
      deliver(std::string_view(buffer, n));
    }
    if (in_fd >= 0 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
      ssize_t n = read(in_fd, buffer, sizeof buffer);
      if (n <= 0) {
        // End of our stdin: half-close, so the command sees EOF and can finish.
        shutdown(stream->fd, SHUT_WR);
        in_fd = -1;
      } else {
        for (ssize_t sent = 0; sent < n;) {
          ssize_t w = write(stream->fd, buffer + sent, n - sent);
          if (w <= 0) {
            break;
          }
          sent += w;
        }
      }
    }
    if (winch_fd >= 0 && (fds[2].revents & POLLIN)) {
      // One read empties it (one byte per signal); the fd may block, so no loop.
      [[maybe_unused]] auto drained = read(winch_fd, buffer, sizeof buffer);
      if (auto now = io.terminal_size()) {
        // The latest size wins over a pending first one.
        size.reset();
        resize_exec(exec_id, *now);
      }
    }
  }
}

bool EngineApi::resize_exec(const std::string& exec_id, TerminalSize size) {
  auto response = call(
      "POST", fmt::format("/exec/{}/resize?h={}&w={}", url_encode(exec_id), size.rows, size.cols));
  if (response.status == 200 || response.status == 201 || response.status == 204) {
    return true;
  }
  spdlog::debug("docker: resize of exec {} refused: {}", exec_id.substr(0, 12),
                engine_message(response));
  return false;
}

json EngineApi::inspect_exec(const std::string& exec_id) {
  auto response = call("GET", "/exec/" + url_encode(exec_id) + "/json");
  if (response.status != 200) {
    fail("cannot inspect exec", response);
  }
  return answer_of(response, "inspect exec");
}

bool EngineApi::had_oom_event(const std::string& container,
                              std::chrono::system_clock::time_point since,
                              std::chrono::system_clock::time_point until) {
  auto stamp = [](std::chrono::system_clock::time_point t) {
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
    return fmt::format("{}.{:09}", ns / 1000000000, ns % 1000000000);
  };
  json filters = {{"container", {container}}, {"event", {"oom"}}};
  auto response = call("GET", fmt::format("/events?since={}&until={}&filters={}", stamp(since),
                                          stamp(until), url_encode(filters.dump())));
  if (response.status != 200) {
    fail("cannot read the engine's events", response);
  }
  // One JSON object per line; any of them is an oom of this container.
  return response.body.find("\"oom\"") != std::string::npos;
}

void StreamDemuxer::feed(std::string_view bytes) {
  if (m_raw) {
    m_io.err(bytes);
    return;
  }
  m_pending.append(bytes);
  size_t offset = 0;
  while (m_pending.size() - offset >= 8) {
    auto* header = reinterpret_cast<const unsigned char*>(m_pending.data() + offset);
    // When the engine cannot start the program it writes its error as plain text instead of
    // frames: pass that (and whatever follows) through as stderr.
    if (header[0] > 2 || header[1] != 0 || header[2] != 0 || header[3] != 0) {
      m_raw = true;
      m_io.err(std::string_view(m_pending).substr(offset));
      m_pending.clear();
      return;
    }
    size_t size = (size_t(header[4]) << 24) | (size_t(header[5]) << 16) | (size_t(header[6]) << 8) |
                  size_t(header[7]);
    if (m_pending.size() - offset - 8 < size) {
      break;
    }
    std::string_view payload(m_pending.data() + offset + 8, size);
    // 0 is stdin echoed back (tty off), 1 stdout, 2 stderr.
    if (header[0] == 2) {
      m_io.err(payload);
    } else {
      m_io.out(payload);
    }
    offset += 8 + size;
  }
  m_pending.erase(0, offset);
}

} // namespace sandboxer::drivers::docker
