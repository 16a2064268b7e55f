#include "core/external/external_driver.hpp"

#include <cstdlib>
#include <fmt/format.h>
#include <mutex>
#include <optional>
#include <vector>

#include <sandboxer/base64.hpp>
#include <sandboxer/error.hpp>
#include <sandboxer/ports.hpp>

#include "core/external/connection.hpp"

namespace sandboxer::external {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

// Deadlines of the calls (docs/driver-protocol.md). $SANDBOXER_DRIVER_TIMEOUT (seconds) replaces
// every one but exec's, whose command may run as long as the user wants.
std::chrono::milliseconds timeout_of(const std::string& method) {
  if (method == "exec") {
    return 24h;
  }
  if (const char* text = std::getenv("SANDBOXER_DRIVER_TIMEOUT"); text && *text) {
    char* end = nullptr;
    long seconds = std::strtol(text, &end, 10);
    if (end && *end == '\0' && seconds > 0) {
      return std::chrono::seconds(seconds);
    }
  }
  if (method == "initialize" || method == "validate") {
    return 30s;
  }
  if (method == "create" || method == "restore" || method == "snapshot" || method == "pause" ||
      method == "resume") {
    return 15min;
  }
  return 5min;
}

json time_text(const std::optional<TimePoint>& t) {
  return t ? json(format_time(*t)) : json(nullptr);
}

const json& member(const json& result, const char* key, const std::string& method) {
  if (!result.is_object() || !result.contains(key)) {
    throw DriverError(DriverError::Kind::error,
                      fmt::format("the driver's {} result has no \"{}\"", method, key));
  }
  return result[key];
}

std::string string_member(const json& result, const char* key, const std::string& method) {
  const json& value = member(result, key, method);
  if (!value.is_string() || value.get<std::string>().empty()) {
    throw DriverError(
        DriverError::Kind::error,
        fmt::format("the driver's {} result: \"{}\" must be a non-empty string", method, key));
  }
  return value.get<std::string>();
}

// result.ports of a create or restore: one binding per asked port, each whole (a driver that
// forgets a port, or says nothing of where it is, would leave `sandboxer port` guessing).
std::vector<PortBinding> ports_of(const json& result, const std::vector<PortSpec>& asked,
                                  const std::string& method) {
  if (asked.empty()) {
    return {};
  }
  const json& ports = member(result, "ports", method);
  auto bad = [&](const std::string& why) {
    return DriverError(DriverError::Kind::error,
                       fmt::format("the driver's {} result: \"ports\" {}", method, why));
  };
  if (!ports.is_array() || ports.size() != asked.size()) {
    throw bad(fmt::format("must list the {} port(s) asked for, one each", asked.size()));
  }
  std::vector<PortBinding> bindings;
  for (size_t i = 0; i < ports.size(); ++i) {
    const json& item = ports[i];
    PortBinding binding;
    if (!item.is_object() || !item.value("port", json()).is_number_integer() ||
        !item.value("host", json()).is_string() || !item.value("url", json()).is_string() ||
        item["host"].get<std::string>().empty() || item["url"].get<std::string>().empty()) {
      throw bad(fmt::format("[{}] needs port, host and url", i));
    }
    binding.port = item["port"].get<int>();
    binding.protocol = item.value("protocol", "tcp");
    binding.host = item["host"].get<std::string>();
    if (item.contains("host_port") && item["host_port"].is_number_integer()) {
      binding.host_port = item["host_port"].get<int>();
    }
    binding.url = item["url"].get<std::string>();
    if (binding.port != asked[i].port || binding.protocol != asked[i].protocol) {
      throw bad(fmt::format("[{}] is {}/{}, where {}/{} was asked", i, binding.port,
                            binding.protocol, asked[i].port, asked[i].protocol));
    }
    bindings.push_back(std::move(binding));
  }
  return bindings;
}

class Factory;

// A connection lent by the factory's pool for one Driver's lifetime: a driver that runs several
// operations at once (reap's parallel destroys) gets one process per operation.
class Lease {
public:
  Lease(const Factory& factory, std::unique_ptr<Connection> connection)
      : m_factory(factory), m_connection(std::move(connection)) {}
  ~Lease();
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  Connection& operator*() const { return *m_connection; }
  Connection* operator->() const { return m_connection.get(); }

private:
  const Factory& m_factory;
  std::unique_ptr<Connection> m_connection;
};

class Factory : public DriverFactory {
public:
  Factory(std::string name, std::filesystem::path path)
      : m_name(std::move(name)), m_path(std::move(path)) {}

  std::string_view name() const override { return m_name; }
  std::string_view doc() const override { return handshake().description; }
  Capabilities capabilities() const override { return handshake().capabilities; }

  json parse_spec(const json& section) const override {
    Lease connection = lease();
    try {
      json result = connection->call({"validate", {{"spec", section}}, timeout_of("validate")});
      const json& spec = member(result, "spec", "validate");
      if (!spec.is_object()) {
        throw DriverError(DriverError::Kind::error,
                          "the driver's validate result: \"spec\" must be an object");
      }
      return spec;
    } catch (const RemoteError& e) {
      if (e.kind() != DriverError::Kind::invalid_spec) {
        throw;
      }
      // Its message without our "NAME: " prefix: the core prefixes the YAML location.
      std::string message = e.what();
      if (message.rfind(m_name + ": ", 0) == 0) {
        message.erase(0, m_name.size() + 2);
      }
      throw SpecError(e.pointer(), message);
    }
  }

  std::unique_ptr<Driver> open(const json& spec, const DriverContext& context) const override;

  // A connection for one operation: an idle one, else a new process. The mutex guards only the
  // pool and the description, never a process start or a call: a start under it made the second
  // concurrent lease wait on itself (reap's parallel destroys hung for good).
  Lease lease() const {
    handshake();
    {
      std::lock_guard lock(m_mutex);
      if (!m_idle.empty()) {
        auto connection = std::move(m_idle.back());
        m_idle.pop_back();
        return Lease(*this, std::move(connection));
      }
    }
    return Lease(*this, start());
  }

  void give_back(std::unique_ptr<Connection> connection) const {
    if (connection && connection->usable()) {
      std::lock_guard lock(m_mutex);
      m_idle.push_back(std::move(connection));
    }
  }

  const Description& handshake() const {
    {
      std::lock_guard lock(m_mutex);
      if (m_description) {
        return *m_description;
      }
    }
    // Two threads may both start the first process: the second is pooled like any other.
    give_back(start());
    std::lock_guard lock(m_mutex);
    return *m_description;
  }

private:
  // A new process, its `initialize` answered and checked.
  std::unique_ptr<Connection> start() const {
    auto connection = std::make_unique<Connection>(m_name, m_path);
    json result = connection->call(
        {"initialize", {{"protocol", protocol::k_version}}, timeout_of("initialize")});
    auto fail = [&](const std::string& what) {
      throw DriverError(DriverError::Kind::error,
                        fmt::format("external driver {} ({}) failed its handshake: {}", m_name,
                                    m_path.string(), what));
    };
    if (!result.is_object()) {
      fail("the initialize result is not an object");
    }
    if (!result.contains("protocol") || !result["protocol"].is_number_integer() ||
        result["protocol"].get<int>() != protocol::k_version) {
      fail(fmt::format("it speaks protocol {}, this sandboxer speaks {}",
                       result.value("protocol", json(nullptr)).dump(), protocol::k_version));
    }
    if (result.contains("name") && result["name"] != m_name) {
      fail(fmt::format("it says its name is {}, but it was found as sandboxer-driver-{}",
                       result["name"].dump(), m_name));
    }
    if (!result.contains("capabilities") || !result["capabilities"].is_object()) {
      fail("the initialize result has no \"capabilities\" object");
    }
    std::lock_guard lock(m_mutex);
    if (!m_description) {
      Description description;
      description.protocol = protocol::k_version;
      description.description = result.value("description", "");
      description.capabilities = protocol::capabilities_of(result["capabilities"]);
      description.schema = result.value("schema", json(nullptr));
      m_description = std::move(description);
    }
    return connection;
  }

  std::string m_name;
  std::filesystem::path m_path;
  mutable std::mutex m_mutex;
  mutable std::optional<Description> m_description;
  mutable std::vector<std::unique_ptr<Connection>> m_idle;
};

Lease::~Lease() {
  m_factory.give_back(std::move(m_connection));
}

class ExternalDriver : public Driver {
public:
  ExternalDriver(const Factory& factory, json spec, std::map<std::string, std::string> secrets)
      : m_factory(factory), m_spec(std::move(spec)), m_secrets(std::move(secrets)) {}

  CreateResult create(const CreateRequest& request) override {
    if (request.replaces) {
      unsupported(m_factory.name(), "restore --in-place");
    }
    json params = {{"id", request.sandbox_id}, {"name", request.name},
                   {"spec", m_spec},           {"labels", request.labels},
                   {"env", request.env},       {"expires_at", time_text(request.expires_at)}};
    std::string method = "create";
    if (request.from_snapshot) {
      method = "restore";
      params["backend_ref"] = *request.from_snapshot;
    }
    if (!request.ports.empty()) {
      // Only when there are some: the core sends ports only to a driver that declares them.
      params["ports"] = port_specs_json(request.ports);
    }
    if (request.pool_member) {
      params["pool_member"] = true; // a hint: the driver may start it from a checkpoint of its own
    }
    json result = call(method, params);
    CreateResult out;
    out.backend_id = string_member(result, "backend_id", method);
    out.info = result.value("info", json::object());
    if (!out.info.is_object()) {
      out.info = json::object();
    }
    out.ports = ports_of(result, request.ports, method);
    return out;
  }

  void destroy(const SandboxHandle& sandbox) override {
    json params = {{"backend_id", sandbox.backend_id}, {"spec", m_spec}};
    if (sandbox.stop_grace) {
      params["grace_seconds"] = sandbox.stop_grace->count();
    }
    call("destroy", params);
  }

  BackendStatus status(const SandboxHandle& sandbox) override {
    json result;
    try {
      result = call("status", {{"backend_id", sandbox.backend_id}, {"spec", m_spec}});
    } catch (const DriverError& e) {
      if (e.kind() == DriverError::Kind::unsupported) {
        return {BackendStatus::State::unknown, "the driver does not report status"};
      }
      throw;
    }
    BackendStatus out;
    std::string state = result.is_object() ? result.value("state", "unknown") : "unknown";
    for (auto s : {BackendStatus::State::running, BackendStatus::State::stopped,
                   BackendStatus::State::paused, BackendStatus::State::missing}) {
      if (state == to_string(s)) {
        out.state = s;
      }
    }
    out.detail = result.is_object() ? result.value("detail", "") : "";
    return out;
  }

  SnapshotResult snapshot(const SandboxHandle& sandbox, const SnapshotRequest& request) override {
    json params = {{"backend_id", sandbox.backend_id},
                   {"snapshot_id", request.snapshot_id},
                   {"name", request.name},
                   {"spec", m_spec}};
    if (request.disk_only) {
      params["disk_only"] = true; // only when asked: drivers written before it never see it
    }
    json result = call("snapshot", params);
    SnapshotResult out;
    out.backend_ref = string_member(result, "backend_ref", "snapshot");
    if (result.contains("size_bytes") && result["size_bytes"].is_number_unsigned()) {
      out.size_bytes = result["size_bytes"].get<std::uint64_t>();
    }
    return out;
  }

  void delete_snapshot(const std::string& backend_ref) override {
    call("delete_snapshot", {{"backend_ref", backend_ref}, {"spec", m_spec}});
  }

  int exec(const SandboxHandle& sandbox, const ExecRequest& request, ExecIo& io) override {
    json params = {{"backend_id", sandbox.backend_id},
                   {"argv", request.argv},
                   {"env", request.env},
                   {"workdir", request.workdir ? json(*request.workdir) : json(nullptr)},
                   {"tty", request.tty},
                   {"stdin", request.attach_stdin},
                   {"user", request.user ? json(*request.user) : json(nullptr)},
                   {"spec", m_spec}};
    Connection::Call call{"exec", params, timeout_of("exec")};
    call.on_output = [&](const json& output) {
      std::string data;
      try {
        data = base64_decode(output.value("data", ""));
      } catch (const std::invalid_argument&) {
        throw DriverError(DriverError::Kind::error,
                          fmt::format("driver {}: an output notification's data is not base64",
                                      m_factory.name()));
      }
      if (output.value("stream", "stdout") == "stderr") {
        io.err(data);
      } else {
        io.out(data);
      }
    };
    call.input_fd = request.attach_stdin ? io.stdin_fd() : -1;
    json result = send(std::move(call));
    const json& code = member(result, "exit_code", "exec");
    // An exit status is a byte: 256 must not come back as success, nor 2^31 overflow.
    if (!code.is_number_integer() || code.get<long long>() < 0 || code.get<long long>() > 255) {
      throw DriverError(DriverError::Kind::error,
                        fmt::format("the driver's exec result: \"exit_code\" must be an integer "
                                    "from 0 to 255, not {}",
                                    code.dump()));
    }
    return code.get<int>();
  }

  // The optional `logs` method: one `output` notification a line, then `{}`. A driver without it
  // answers -32601, which is `unsupported` (exit 4).
  void logs(const SandboxHandle& sandbox, const LogsRequest& request, LogSink& sink) override {
    json params = {{"backend_id", sandbox.backend_id},
                   {"follow", request.follow},
                   {"since", request.since ? json(format_time(*request.since)) : json(nullptr)},
                   {"tail", request.tail ? json(*request.tail) : json(nullptr)},
                   {"spec", m_spec}};
    // A followed log lasts as long as the sandbox, as an exec's command does; Ctrl-C cancels it.
    Connection::Call call{"logs", params, timeout_of(request.follow ? "exec" : "logs")};
    call.on_output = [&](const json& output) {
      LogLine line;
      try {
        line.text = base64_decode(output.value("data", ""));
      } catch (const std::invalid_argument&) {
        throw DriverError(
            DriverError::Kind::error,
            fmt::format("driver {}: a logs notification's data is not base64", m_factory.name()));
      }
      line.stream = output.value("stream", "stdout");
      if (line.stream != "stderr" && line.stream != "console") {
        line.stream = "stdout";
      }
      if (auto time = output.find("time"); time != output.end() && time->is_string()) {
        line.time = parse_time(time->get<std::string>());
      }
      sink.line(line);
    };
    send(std::move(call));
  }

  // The optional copy methods (capability `copy`, docs/driver-protocol.md "Copy").
  PathInfo stat_path(const SandboxHandle& sandbox, const std::string& path) override {
    json result =
        call("stat_path", {{"backend_id", sandbox.backend_id}, {"path", path}, {"spec", m_spec}});
    PathInfo out;
    const std::string kind = string_member(result, "kind", "stat_path");
    bool known = false;
    for (auto k : {PathInfo::Kind::missing, PathInfo::Kind::file, PathInfo::Kind::directory,
                   PathInfo::Kind::symlink, PathInfo::Kind::other}) {
      if (kind == to_string(k)) {
        out.kind = k;
        known = true;
      }
    }
    if (!known) {
      throw DriverError(
          DriverError::Kind::error,
          fmt::format("the driver's stat_path result: unknown kind {}", json(kind).dump()));
    }
    if (auto size = result.find("size"); size != result.end() && size->is_number_unsigned()) {
      out.size = size->get<uint64_t>();
    }
    if (auto mode = result.find("mode"); mode != result.end() && mode->is_number_unsigned()) {
      out.mode = mode->get<uint32_t>() & 07777;
    }
    if (out.kind == PathInfo::Kind::symlink) {
      out.link_target = result.value("link_target", "");
    }
    return out;
  }

  // The stream goes as `input` chunks, then its end; the driver answers {bytes} once it has
  // unpacked it all, and a count other than what was sent is a stream cut short.
  void copy_in(const SandboxHandle& sandbox, const CopyInRequest& request,
               CopySource& source) override {
    json params = {
        {"backend_id", sandbox.backend_id}, {"directory", request.directory}, {"spec", m_spec}};
    if (request.owner) {
      params["owner"] = *request.owner; // only when set: the core sends it only with copy_owner
    }
    uint64_t sent = 0;
    Connection::Call call{"copy_in", params, timeout_of("copy_in")};
    call.source = [&](char* buffer, size_t size) { return source.read(buffer, size); };
    call.deadline_from_progress = true;
    call.sent = &sent;
    json result = send(std::move(call));
    check_count(result, "copy_in", sent);
  }

  // The driver sends the stream as `output` chunks (stream "tar"), then {bytes}: an answer that
  // does not count what arrived, or an end without an answer, is an error, never a short copy.
  void copy_out(const SandboxHandle& sandbox, const CopyOutRequest& request,
                CopySink& sink) override {
    json params = {{"backend_id", sandbox.backend_id},
                   {"path", request.path},
                   {"follow", request.follow},
                   {"spec", m_spec}};
    uint64_t received = 0;
    Connection::Call call{"copy_out", params, timeout_of("copy_out")};
    call.deadline_from_progress = true;
    call.on_output = [&](const json& output) {
      if (output.value("stream", "") != protocol::k_copy_stream) {
        throw DriverError(DriverError::Kind::error,
                          fmt::format("driver {}: a copy_out notification of stream {} (not "
                                      "\"tar\")",
                                      m_factory.name(), output.value("stream", json()).dump()));
      }
      std::string bytes;
      try {
        bytes = protocol::copy_chunk_of(output);
      } catch (const std::invalid_argument& e) {
        throw DriverError(DriverError::Kind::error,
                          fmt::format("driver {}: copy_out sent {}", m_factory.name(), e.what()));
      }
      received += bytes.size();
      sink.write(bytes);
    };
    json result = send(std::move(call));
    check_count(result, "copy_out", received);
  }

  void extend(const SandboxHandle& sandbox, TimePoint new_deadline) override {
    call("extend", {{"backend_id", sandbox.backend_id},
                    {"expires_at", format_time(new_deadline)},
                    {"spec", m_spec}});
  }

  std::vector<RemoteResource> list_remote(const Labels& selector) override {
    json result = call("list", {{"labels", selector}, {"spec", m_spec}});
    const json& resources = member(result, "resources", "list");
    if (!resources.is_array()) {
      throw DriverError(DriverError::Kind::error,
                        "the driver's list result: \"resources\" must be an array");
    }
    std::vector<RemoteResource> out;
    for (const auto& item : resources) {
      RemoteResource resource;
      resource.backend_id = string_member(item, "backend_id", "list");
      const json labels = item.is_object() ? item.value("labels", json::object()) : json::object();
      for (const auto& [key, value] : labels.items()) {
        if (value.is_string()) {
          resource.labels[key] = value.get<std::string>();
        }
      }
      resource.state = item.value("state", "");
      out.push_back(std::move(resource));
    }
    return out;
  }

  // The optional pause and resume (capability `pause`, docs/driver-protocol.md "Pause").
  PauseResult pause(const SandboxHandle& sandbox, const PauseRequest& request) override {
    json params = protocol::pause_params(sandbox, request);
    params["spec"] = m_spec;
    return protocol::pause_result_of(declared_call("pause", std::move(params)));
  }

  ResumeResult resume(const SandboxHandle& sandbox, const ResumeRequest& request) override {
    // The record's name is not in the request: the id stands for it, as for a sandbox created
    // without a name.
    json params = protocol::resume_params(sandbox, request, sandbox.sandbox_id);
    params["spec"] = m_spec;
    return protocol::resume_result_of(declared_call("resume", std::move(params)));
  }

private:
  // A method of the capability `pause`: never sent to a driver that did not declare it, and a
  // driver that declared it but does not know the method (-32601) is refused (exit 7), as the
  // core refuses a driver without the capability: the pause it promised cannot happen.
  json declared_call(const std::string& method, json params) {
    if (!m_factory.capabilities().pause) {
      throw DriverError(DriverError::Kind::refused,
                        fmt::format("{} is not supported by driver {}", method, m_factory.name()));
    }
    try {
      return call(method, std::move(params));
    } catch (const RemoteError& e) {
      if (!e.method_not_found()) {
        throw;
      }
      throw DriverError(DriverError::Kind::refused,
                        fmt::format("driver {} declares the capability pause but does not answer "
                                    "{} (JSON-RPC -32601, method not found)",
                                    m_factory.name(), method));
    }
  }

  void check_count(const json& result, const char* method, uint64_t moved) const {
    const json& bytes = member(result, "bytes", method);
    if (!bytes.is_number_unsigned() || bytes.get<uint64_t>() != moved) {
      throw DriverError(DriverError::Kind::error,
                        fmt::format("driver {}: its {} result counts {} bytes of the stream, but "
                                    "{} moved: the stream was cut short",
                                    m_factory.name(), method, bytes.dump(), moved));
    }
  }

  // Every call that reaches the backend carries the secrets: a SaaS needs its key to destroy as
  // much as to create (docs/driver-protocol.md).
  json call(const std::string& method, json params) {
    return send({method, std::move(params), timeout_of(method)});
  }
  json send(Connection::Call call) {
    call.params["secrets"] = m_secrets;
    Lease connection = m_factory.lease();
    return connection->call(call);
  }

  const Factory& m_factory;
  json m_spec;
  std::map<std::string, std::string> m_secrets;
};

std::unique_ptr<Driver> Factory::open(const json& spec, const DriverContext& context) const {
  handshake();
  return std::make_unique<ExternalDriver>(*this, spec, context.secrets);
}

} // namespace

std::unique_ptr<DriverFactory> make_factory(const std::string& name,
                                            const std::filesystem::path& path) {
  return std::make_unique<Factory>(name, path);
}

const Description& describe(const DriverFactory& factory) {
  return dynamic_cast<const Factory&>(factory).handshake();
}

} // namespace sandboxer::external
