#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include <sandboxer/driver.hpp>
#include <sandboxer/http.hpp>

#include "drivers/docker/hijack.hpp"

namespace sandboxer::drivers::docker {

// Where the engine listens: a unix socket (the default /var/run/docker.sock) or tcp://host:port.
struct Endpoint {
  std::optional<std::string> socket_path;
  std::string base_url; // "http://docker" for a socket, "http://host:port" for tcp
  // As DOCKER_HOST spells it (unix:///path, tcp://host:port): what a record keeps.
  std::string describe() const;
};

// The engine a new sandbox goes to: the profile's `host`, else DOCKER_HOST, else the default
// socket, spelled as DOCKER_HOST is. Never throws: resolve_endpoint judges it.
std::string engine_address(const std::optional<std::string>& host);
// The endpoint of an engine_address. Throws DriverError for a form we cannot use (ssh://, or tcp
// with TLS).
Endpoint resolve_endpoint(const std::string& address);

// `text` as a URL query value or path segment (RFC 3986 unreserved characters kept).
std::string url_encode(std::string_view text);

// A thin client of the Docker Engine HTTP API (v1.41 and later), one method per call sandboxer
// makes. Every failure is a DriverError whose message says what to do about it.
class EngineApi {
public:
  static constexpr const char* k_api_version = "1.41";

  EngineApi(Endpoint endpoint, http::Transport& transport);

  std::optional<nlohmann::json> inspect_image(const std::string& image);
  // POST /images/create, reporting each progress line to `progress`.
  void pull_image(const std::string& image, Progress& progress);
  // nullopt when the engine does not have the body's image.
  std::optional<std::string> create_container(const std::string& name, const nlohmann::json& body);
  void start_container(const std::string& id);
  // nullopt when the container does not exist.
  std::optional<nlohmann::json> inspect_container(const std::string& id);
  void stop_container(const std::string& id, int grace_seconds);
  // POST /containers/{id}/pause (the cgroup freezer): already paused is success; not_found when
  // the container is gone.
  void pause_container(const std::string& id);
  // POST /containers/{id}/unpause: false when the container was not paused (running, or stopped);
  // not_found when it is gone.
  bool unpause_container(const std::string& id);
  // Returns false when the container does not exist.
  bool rename_container(const std::string& id, const std::string& new_name);
  // Removes with its anonymous volumes; returns false when it was already gone.
  bool remove_container(const std::string& id, bool force);
  nlohmann::json list_containers(const nlohmann::json& label_filters);
  std::string commit(const std::string& container, const std::string& repo, const std::string& tag,
                     const nlohmann::json& labels);
  // Returns false when the image was already gone.
  bool remove_image(const std::string& image);

  // GET /containers/{id}/logs with timestamps, each line to `sink`. `tty`: the container has a
  // terminal, and the stream is raw rather than multiplexed. Without `follow`, the answer is
  // bounded by a minute; with it, the stream goes on until the container stops, and a signal ends
  // it (Interrupted). Throws not_found when the container is gone.
  void container_logs(const std::string& id, const LogsRequest& logs, bool tty, LogSink& sink);

  std::string create_exec(const std::string& container, const nlohmann::json& body);
  // Starts an exec without stdin and streams its demultiplexed output.
  void start_exec(const std::string& exec_id, bool tty, ExecIo& io);
  // Starts an exec on a hijacked connection, copying io.stdin_fd() into it (when >= 0). With a
  // tty, the exec's terminal gets the local terminal's size as soon as the exec runs, and again
  // each time io.resize_fd() says the local terminal was resized. Each SIGINT/SIGTERM/SIGHUP that
  // sandboxer receives meanwhile is handed to `forward_signal` (when set), and the stream goes on
  // until the command ends.
  void start_exec_attached(const std::string& exec_id, bool tty, ExecIo& io,
                           const std::function<void(int)>& forward_signal = nullptr);
  // POST /exec/{id}/resize?h=&w=. Returns false when the engine refuses, as it does before the
  // exec's process has started and after it has ended.
  bool resize_exec(const std::string& exec_id, TerminalSize size);
  nlohmann::json inspect_exec(const std::string& exec_id);
  // Whether the engine reported an "oom" event of `container` between the two times (GET /events
  // with since and until, which returns at once).
  bool had_oom_event(const std::string& container, std::chrono::system_clock::time_point since,
                     std::chrono::system_clock::time_point until);

  // The archive endpoint (`sandboxer cp`), drivers/docker/archive.cpp. Each throws not_found
  // when the container is gone.
  // HEAD /containers/{id}/archive: the engine's stat of `path` (X-Docker-Container-Path-Stat),
  // which does not follow a final symbolic link; nullopt when nothing is at `path`.
  std::optional<nlohmann::json> stat_archive_path(const std::string& id, const std::string& path);
  // PUT /containers/{id}/archive: unpacks the tar stream that `read` hands over (0 at its end)
  // into the existing directory `directory`, sent as it is read. `copy_uid_gid`: the engine owns
  // what it makes by the container's configured user instead of the stream's uid/gid.
  void put_archive(const std::string& id, const std::string& directory, bool copy_uid_gid,
                   const std::function<size_t(char*, size_t)>& read);
  // GET /containers/{id}/archive: the tar stream of `path`, to `write` as it arrives. A missing
  // path throws not_found naming it.
  void get_archive(const std::string& id, const std::string& path,
                   const std::function<void(std::string_view)>& write);

  const Endpoint& endpoint() const { return m_endpoint; }

private:
  http::Response call(const std::string& method, const std::string& path,
                      const std::optional<nlohmann::json>& body = std::nullopt,
                      std::chrono::milliseconds timeout = std::chrono::seconds(60));
  // Sends `request` (`method` and `path` name it in errors): a failure to reach the engine becomes
  // the error that says what to do, an engine too old its own error. Statuses are returned.
  http::Response send(const http::Request& request, const std::string& method,
                      const std::string& path);
  // Throws the "engine too old" error for the engine's 400 to a client version it does not speak.
  void reject_old_engine(const http::Response& response) const;
  [[noreturn]] void fail(const std::string& what, const http::Response& response) const;
  // The not_found of an archive call that answered 404: the container is gone, or `path` is.
  [[noreturn]] void archive_not_found(const std::string& id, const std::string& path);

  Endpoint m_endpoint;
  http::Transport& m_transport;
};

// Splits the engine's multiplexed stream (8-byte headers: stream, 0, 0, 0, big-endian size) into
// stdout and stderr. Feed it chunks as they arrive, in any sizes.
class StreamDemuxer {
public:
  explicit StreamDemuxer(ExecIo& io) : m_io(io) {}
  void feed(std::string_view bytes);

private:
  ExecIo& m_io;
  std::string m_pending;
  bool m_raw = false;
};

} // namespace sandboxer::drivers::docker
