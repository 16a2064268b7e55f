#include <algorithm>
#include <array>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <fcntl.h>
#include <fmt/format.h>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <spdlog/spdlog.h>
#include <thread>
#include <unistd.h>

#include <sandboxer/base64.hpp>
#include <sandboxer/clock.hpp>
#include <sandboxer/error.hpp>
#include <sandboxer/log.hpp>
#include <sandboxer/ports.hpp>
#include <sandboxer/sdk.hpp>

#include "sdk/copy_streams.hpp"
#include "sdk/protocol/protocol.hpp"

namespace sandboxer::sdk {
namespace {

using json = nlohmann::json;

class NoProgress : public Progress {
public:
  void update(std::string_view) override {}
};

std::filesystem::path default_data_dir(std::string_view name) {
  std::filesystem::path base;
  if (const char* state = std::getenv("XDG_STATE_HOME"); state && *state) {
    base = state;
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    base = std::filesystem::path(home) / ".local" / "state";
  } else {
    base = std::filesystem::temp_directory_path();
  }
  return base / "sandboxer" / "drivers" / std::string(name);
}

// A request's params as the driver types want them.
const json& field(const json& params, const char* key) {
  static const json null;
  return params.is_object() && params.contains(key) ? params[key] : null;
}
std::string text(const json& params, const char* key) {
  const json& value = field(params, key);
  return value.is_string() ? value.get<std::string>() : "";
}
std::map<std::string, std::string> string_map(const json& params, const char* key) {
  std::map<std::string, std::string> out;
  const json& value = field(params, key);
  if (value.is_object()) {
    for (const auto& [k, v] : value.items()) {
      if (v.is_string()) {
        out[k] = v.get<std::string>();
      }
    }
  }
  return out;
}
std::optional<TimePoint> time_of(const json& params, const char* key) {
  const json& value = field(params, key);
  return value.is_string() ? parse_time(value.get<std::string>()) : std::nullopt;
}

// The stdin of each running exec: a pipe fed from `input` notifications, which may arrive before
// the exec request is handled.
class Inputs {
public:
  ~Inputs() {
    for (auto& [id, fds] : m_pipes) {
      close_fds(fds);
    }
  }
  // The read end for request `id` (made now if no input came yet).
  int reader(long id) { return pipe_of(id)[0]; }
  void feed(long id, const json& params) {
    int fd = pipe_of(id)[1];
    if (fd < 0) {
      return;
    }
    if (params.value("eof", false)) {
      std::lock_guard lock(m_mutex);
      ::close(m_pipes[id][1]);
      m_pipes[id][1] = -1;
      return;
    }
    std::string data;
    try {
      data = base64_decode(params.value("data", ""));
    } catch (const std::invalid_argument&) {
      return;
    }
    std::string_view rest = data;
    while (!rest.empty()) {
      ssize_t n = ::write(fd, rest.data(), rest.size());
      if (n <= 0) {
        return; // the command closed its stdin
      }
      rest.remove_prefix(static_cast<size_t>(n));
    }
  }
  void done(long id) {
    std::lock_guard lock(m_mutex);
    if (auto it = m_pipes.find(id); it != m_pipes.end()) {
      close_fds(it->second);
      m_pipes.erase(it);
    }
  }

private:
  std::array<int, 2>& pipe_of(long id) {
    std::lock_guard lock(m_mutex);
    auto [it, added] = m_pipes.try_emplace(id, std::array<int, 2>{-1, -1});
    if (added) {
      int fds[2];
      if (::pipe2(fds, O_CLOEXEC) == 0) {
        it->second = {fds[0], fds[1]};
      }
    }
    return it->second;
  }
  static void close_fds(std::array<int, 2>& fds) {
    for (int& fd : fds) {
      if (fd >= 0) {
        ::close(fd);
        fd = -1;
      }
    }
  }
  std::mutex m_mutex;
  std::map<long, std::array<int, 2>> m_pipes;
};

// Reads stdin on its own thread: requests are queued for the main loop, `input` notifications go
// straight to the running command. After `shutdown` the thread may still sit in read(): it is left
// to the process's end, holding what it uses by shared_ptr.
class Reader {
public:
  Reader(int fd, std::shared_ptr<Inputs> inputs, std::shared_ptr<CopyStreams> copies)
      : m_state(std::make_shared<State>()) {
    std::thread([fd, inputs, copies, state = m_state] {
      run(fd, *inputs, *copies, *state);
    }).detach();
  }
  // The next request, or none once stdin ended.
  std::optional<json> next() {
    std::unique_lock lock(m_state->mutex);
    m_state->ready.wait(lock, [&] { return !m_state->queue.empty() || m_state->ended; });
    if (m_state->queue.empty()) {
      return std::nullopt;
    }
    json message = std::move(m_state->queue.front());
    m_state->queue.pop_front();
    return message;
  }

private:
  struct State {
    std::mutex mutex;
    std::condition_variable ready;
    std::deque<json> queue;
    bool ended = false;
  };

  static void run(int fd, Inputs& inputs, CopyStreams& copies, State& state) {
    protocol::LineBuffer lines;
    char buffer[65536];
    while (true) {
      ssize_t n = ::read(fd, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n <= 0) {
        break;
      }
      try {
        lines.feed(std::string_view(buffer, static_cast<size_t>(n)));
      } catch (const std::length_error&) {
        break;
      }
      std::string line;
      while (lines.next(line)) {
        if (line.empty()) {
          continue;
        }
        json message = json::parse(line, nullptr, false);
        if (message.is_object() && message.value("method", "") == "input" &&
            !message.contains("id")) {
          const json& params = field(message, "params");
          const long id = params.value("id", -1L);
          if (!copies.input(id, params)) {
            inputs.feed(id, params);
          }
          continue;
        }
        if (message.is_object() && !message.contains("id")) {
          // cancel: a copy_in's stream is cut, so that the driver drops what it unpacked; other
          // work ends with the process instead.
          if (message.value("method", "") == "cancel") {
            copies.cancel(field(message, "params").value("id", -1L));
          }
          continue;
        }
        if (message.is_object() && message.value("method", "") == "copy_in" &&
            message["id"].is_number_integer()) {
          copies.open(message["id"].get<long>()); // before its chunks, which follow it
        }
        std::lock_guard lock(state.mutex);
        state.queue.push_back(message.is_discarded() ? json(nullptr) : std::move(message));
        state.ready.notify_one();
      }
    }
    copies.end_all();
    std::lock_guard lock(state.mutex);
    state.ended = true;
    state.ready.notify_one();
  }

  std::shared_ptr<State> m_state;
};

class Server {
public:
  Server(const DriverFactory& factory, const ServeOptions& options)
      : m_factory(factory), m_options(options) {
    if (m_options.data_dir.empty()) {
      m_options.data_dir = default_data_dir(factory.name());
    }
  }

  int run() {
    Reader reader(m_options.in_fd, m_inputs, m_copies);
    while (auto message = reader.next()) {
      if (!message->is_object()) {
        send({{"jsonrpc", "2.0"},
              {"id", nullptr},
              {"error", {{"code", protocol::k_parse_error}, {"message", "not a JSON object"}}}});
        continue;
      }
      const json id = message->value("id", json(nullptr));
      const std::string method = message->value("method", "");
      try {
        json result = dispatch(id, method, field(*message, "params"));
        send({{"jsonrpc", "2.0"}, {"id", id}, {"result", result}});
      } catch (const SpecError& e) {
        reply_error(id,
                    protocol::error_object(DriverError::Kind::invalid_spec, e.what(), e.pointer()));
      } catch (const DriverError& e) {
        reply_error(id, protocol::error_object(e.kind(), e.what()));
      } catch (const UnknownMethod&) {
        reply_error(id, {{"code", protocol::k_method_not_found},
                         {"message", fmt::format("no method \"{}\"", method)}});
      } catch (const std::exception& e) {
        reply_error(id, protocol::error_object(DriverError::Kind::error, e.what()));
      }
      if (method == "shutdown") {
        break;
      }
    }
    return 0;
  }

private:
  struct UnknownMethod {};

  void send(const json& message) {
    std::lock_guard lock(m_out_mutex);
    protocol::write_line(m_options.out_fd, message);
  }
  void reply_error(const json& id, const json& error) {
    send({{"jsonrpc", "2.0"}, {"id", id}, {"error", error}});
  }

  std::unique_ptr<Driver> open(const json& params) {
    DriverContext context;
    context.data_dir = m_options.data_dir;
    std::error_code ec;
    std::filesystem::create_directories(context.data_dir, ec);
    context.clock = &system_clock();
    context.progress = &m_progress;
    context.secrets = string_map(params, "secrets");
    return m_factory.open(field(params, "spec"), context);
  }

  static SandboxHandle handle_of(const json& params) {
    SandboxHandle handle;
    handle.backend_id = text(params, "backend_id");
    handle.spec = field(params, "spec");
    if (const json& grace = field(params, "grace_seconds"); grace.is_number_integer()) {
      handle.stop_grace = std::chrono::seconds(grace.get<long>());
    }
    // pause and resume send the record's info (an emulating driver keeps its state there), and
    // resume the sandbox's id.
    if (const json& info = field(params, "info"); info.is_object()) {
      handle.info = info;
    }
    handle.sandbox_id = text(params, "id");
    return handle;
  }

  json dispatch(const json& id, const std::string& method, const json& params) {
    if (method == "initialize") {
      if (field(params, "protocol") != protocol::k_version) {
        throw DriverError(DriverError::Kind::unsupported,
                          fmt::format("this driver speaks protocol {}", protocol::k_version));
      }
      return {{"protocol", protocol::k_version},
              {"name", m_factory.name()},
              {"description", m_factory.doc()},
              {"capabilities", protocol::capabilities_json(m_factory.capabilities())},
              {"schema", m_factory.schema()}};
    }
    if (method == "shutdown") {
      return json::object();
    }
    if (method == "validate") {
      return {{"spec", m_factory.parse_spec(field(params, "spec"))}};
    }
    if (method == "create" || method == "restore") {
      CreateRequest request;
      request.sandbox_id = text(params, "id");
      request.name = text(params, "name");
      request.labels = string_map(params, "labels");
      request.env = string_map(params, "env");
      request.expires_at = time_of(params, "expires_at");
      if (method == "restore") {
        request.from_snapshot = text(params, "backend_ref");
      }
      if (params.contains("ports")) {
        request.ports = port_specs_from_json(params["ports"]);
      }
      CreateResult result = open(params)->create(request);
      json answer = {{"backend_id", result.backend_id}, {"info", result.info}};
      if (!request.ports.empty()) {
        answer["ports"] = port_bindings_json(result.ports);
      }
      return answer;
    }
    if (method == "destroy" || method == "delete_snapshot") {
      try {
        if (method == "destroy") {
          open(params)->destroy(handle_of(params));
        } else {
          open(params)->delete_snapshot(text(params, "backend_ref"));
        }
      } catch (const DriverError& e) {
        if (e.kind() != DriverError::Kind::not_found) {
          throw; // already gone is success
        }
      }
      return json::object();
    }
    if (method == "status") {
      BackendStatus status = open(params)->status(handle_of(params));
      return {{"state", to_string(status.state)}, {"detail", status.detail}};
    }
    if (method == "snapshot") {
      const bool disk_only = params.contains("disk_only") && params["disk_only"].is_boolean() &&
                             params["disk_only"].get<bool>();
      SnapshotResult result = open(params)->snapshot(
          handle_of(params), {text(params, "snapshot_id"), text(params, "name"), disk_only});
      return {{"backend_ref", result.backend_ref},
              {"size_bytes", result.size_bytes ? json(*result.size_bytes) : json(nullptr)}};
    }
    if (method == "extend") {
      auto deadline = time_of(params, "expires_at");
      if (!deadline) {
        throw DriverError(DriverError::Kind::invalid_spec, "extend: expires_at is not a time");
      }
      open(params)->extend(handle_of(params), *deadline);
      return json::object();
    }
    if (method == "list") {
      json resources = json::array();
      for (const auto& found : open(params)->list_remote(string_map(params, "labels"))) {
        resources.push_back(
            {{"backend_id", found.backend_id}, {"labels", found.labels}, {"state", found.state}});
      }
      return {{"resources", resources}};
    }
    if (method == "exec") {
      return exec(id, params);
    }
    if (method == "logs") {
      return logs(id, params);
    }
    if (method == "stat_path" && m_factory.capabilities().copy) {
      PathInfo info = open(params)->stat_path(handle_of(params), text(params, "path"));
      json out = {{"kind", to_string(info.kind)}, {"size", info.size}, {"mode", info.mode}};
      if (info.kind == PathInfo::Kind::symlink) {
        out["link_target"] = info.link_target;
      }
      return out;
    }
    if (method == "pause" && m_factory.capabilities().pause) {
      return protocol::pause_result_json(
          open(params)->pause(handle_of(params), protocol::pause_request_of(params)));
    }
    if (method == "resume" && m_factory.capabilities().pause) {
      return protocol::resume_result_json(
          open(params)->resume(handle_of(params), protocol::resume_request_of(params)));
    }
    if (method == "copy_in" && m_factory.capabilities().copy) {
      return copy_in(id, params);
    }
    if (method == "copy_out" && m_factory.capabilities().copy) {
      return copy_out(id, params);
    }
    throw UnknownMethod{};
  }

  // The stream arrives as `input` chunks (CopyStreams, fed by the stdin thread); the answer counts
  // its bytes, all of them read, so that sandboxer can tell a whole stream from a cut one.
  json copy_in(const json& id, const json& params) {
    if (!id.is_number_integer()) {
      throw DriverError(DriverError::Kind::invalid_spec, "copy_in: the request's id is no integer");
    }
    const long stream_id = id.get<long>();
    class Source : public CopySource {
    public:
      Source(CopyStreams& streams, long id) : m_streams(streams), m_id(id) {}
      size_t read(char* buffer, size_t size) override { return m_streams.read(m_id, buffer, size); }

    private:
      CopyStreams& m_streams;
      long m_id;
    };
    struct Close {
      CopyStreams& streams;
      long id;
      ~Close() { streams.close(id); }
    } close{*m_copies, stream_id};
    CopyInRequest request;
    request.directory = text(params, "directory");
    if (std::string owner = text(params, "owner"); !owner.empty()) {
      request.owner = owner;
    }
    Source source(*m_copies, stream_id);
    open(params)->copy_in(handle_of(params), request, source);
    return {{"bytes", m_copies->drain(stream_id)}};
  }

  // The driver's stream goes out as `output` chunks of stream "tar", at most k_copy_chunk bytes
  // each, then the answer counts them.
  json copy_out(const json& id, const json& params) {
    class Sink : public CopySink {
    public:
      Sink(Server& server, const json& id) : m_server(server), m_id(id) {}
      void write(std::string_view bytes) override {
        while (!bytes.empty()) {
          size_t n = std::min(bytes.size(), protocol::k_copy_chunk - m_held.size());
          m_held.append(bytes.substr(0, n));
          bytes.remove_prefix(n);
          if (m_held.size() == protocol::k_copy_chunk) {
            flush();
          }
        }
      }
      void flush() {
        if (m_held.empty()) {
          return;
        }
        m_server.send({{"jsonrpc", "2.0"},
                       {"method", "output"},
                       {"params",
                        {{"id", m_id},
                         {"stream", protocol::k_copy_stream},
                         {"data", base64_encode(m_held)}}}});
        m_sent += m_held.size();
        m_held.clear();
      }
      uint64_t sent() const { return m_sent; }

    private:
      Server& m_server;
      json m_id;
      std::string m_held;
      uint64_t m_sent = 0;
    };
    CopyOutRequest request;
    request.path = text(params, "path");
    request.follow = field(params, "follow") == true;
    Sink sink(*this, id);
    open(params)->copy_out(handle_of(params), request, sink);
    sink.flush();
    return {{"bytes", sink.sent()}};
  }

  // Each line is an `output` notification of the request, its time alongside.
  json logs(const json& id, const json& params) {
    class Sink : public LogSink {
    public:
      Sink(Server& server, const json& id) : m_server(server), m_id(id) {}
      void line(const LogLine& line) override {
        json out = {{"id", m_id}, {"stream", line.stream}, {"data", base64_encode(line.text)}};
        out["time"] = line.time ? json(format_time(*line.time)) : json(nullptr);
        m_server.send({{"jsonrpc", "2.0"}, {"method", "output"}, {"params", out}});
      }

    private:
      Server& m_server;
      json m_id;
    };
    LogsRequest request;
    request.follow = field(params, "follow") == true;
    request.since = time_of(params, "since");
    if (const json& tail = field(params, "tail"); tail.is_number_unsigned()) {
      request.tail = tail.get<std::size_t>();
    }
    Sink sink(*this, id);
    open(params)->logs(handle_of(params), request, sink);
    return json::object();
  }

  json exec(const json& id, const json& params) {
    class Io : public ExecIo {
    public:
      Io(Server& server, const json& id, int stdin_fd)
          : m_server(server), m_id(id), m_stdin(stdin_fd) {}
      void out(std::string_view bytes) override { send("stdout", bytes); }
      void err(std::string_view bytes) override { send("stderr", bytes); }
      int stdin_fd() const override { return m_stdin; }

    private:
      // A driver may hand over a command's whole output at once (a service that answers with
      // it, as saas-stub's does); the lines stay far below the protocol's limit on a line.
      void send(const char* stream, std::string_view bytes) {
        constexpr size_t k_piece = 1024 * 1024;
        do {
          const std::string_view piece = bytes.substr(0, k_piece);
          bytes.remove_prefix(piece.size());
          m_server.send(
              {{"jsonrpc", "2.0"},
               {"method", "output"},
               {"params", {{"id", m_id}, {"stream", stream}, {"data", base64_encode(piece)}}}});
        } while (!bytes.empty());
      }
      Server& m_server;
      json m_id;
      int m_stdin;
    };
    ExecRequest request;
    for (const auto& arg : field(params, "argv")) {
      request.argv.push_back(arg.is_string() ? arg.get<std::string>() : arg.dump());
    }
    if (request.argv.empty()) {
      throw DriverError(DriverError::Kind::invalid_spec, "exec: argv is empty");
    }
    request.env = string_map(params, "env");
    if (std::string workdir = text(params, "workdir"); !workdir.empty()) {
      request.workdir = workdir;
    }
    request.tty = field(params, "tty") == true;
    if (std::string user = text(params, "user"); !user.empty()) {
      request.user = user;
    }
    request.attach_stdin = field(params, "stdin") == true;
    const long input_id = id.is_number_integer() ? id.get<long>() : -1;
    Io io(*this, id, request.attach_stdin ? m_inputs->reader(input_id) : -1);
    struct Done {
      Inputs& inputs;
      long id;
      ~Done() { inputs.done(id); }
    } done{*m_inputs, input_id};
    int code = open(params)->exec(handle_of(params), request, io);
    return {{"exit_code", code}};
  }

  const DriverFactory& m_factory;
  ServeOptions m_options;
  NoProgress m_progress;
  std::shared_ptr<Inputs> m_inputs = std::make_shared<Inputs>();
  std::shared_ptr<CopyStreams> m_copies = std::make_shared<CopyStreams>();
  std::mutex m_out_mutex;
};

} // namespace

int serve(const DriverFactory& factory, const ServeOptions& options) {
  // stdout carries the protocol alone: whatever the driver's code logs goes to stderr, which
  // sandboxer keeps (spdlog's default logger would write it to stdout and break the stream).
  // A driver that set up a logger of its own (a named one) keeps it.
  if (spdlog::default_logger_raw()->name().empty()) {
    log::init("info");
  }
  return Server(factory, options).run();
}

} // namespace sandboxer::sdk
