#include "drivers/e2b/e2b_driver.hpp"

#include <algorithm>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <sandboxer/base64.hpp>
#include <sandboxer/error.hpp>
#include <sandboxer/log.hpp>
#include <sandboxer/ports.hpp>
#include <sandboxer/readiness.hpp>

#include "drivers/e2b/api.hpp"
#include "drivers/e2b/connect.hpp"
#include "drivers/e2b/copy.hpp"
#include "drivers/e2b/files.hpp"
#include "drivers/e2b/logs.hpp"
#include "drivers/e2b/spec.hpp"

namespace sandboxer::drivers::e2b {
namespace {

using nlohmann::json;
using Kind = DriverError::Kind;
using namespace std::chrono_literals;

// How long a sandbox E2B paused at its own deadline (on_expiry: pause) is resumed for when exec
// needs it, and a resume without a running deadline: E2B keeps a later deadline it already has
// (connect only ever extends), and the ledger's deadline still governs reaping.
constexpr std::chrono::seconds k_resume_for{300};
// Snapshots copy the sandbox's memory and disk: much slower than other calls. A pause with memory
// is a snapshot too, and so is the resume that loads it.
constexpr std::chrono::minutes k_snapshot_timeout{10};
// A 409 while E2B is still pausing or resuming the sandbox: how long its state is watched before
// the conflict is reported.
constexpr std::chrono::seconds k_settle_for{30};
// The key of the record's info that says sandboxer paused the sandbox (the pause's id), null once
// it is resumed. A paused sandbox without it was paused by E2B itself (on_expiry: pause).
constexpr const char* k_paused_by = "e2b_pause_id";

// A text field of an API answer, or `fallback` when it is missing or not text: a server that
// sends something unexpected gets a clear error later, not a JSON type exception.
std::string text_of(const json& object, const char* key, const std::string& fallback = "") {
  if (object.is_object()) {
    auto it = object.find(key);
    if (it != object.end() && it->is_string()) {
      return it->get<std::string>();
    }
  }
  return fallback;
}

std::string sandbox_path(const std::string& backend_id) {
  return "/sandboxes/" + url_escape(backend_id);
}

std::map<std::string, std::string> merged(const std::map<std::string, std::string>& first,
                                          const std::map<std::string, std::string>& second) {
  auto out = first;
  for (const auto& [key, value] : second) {
    out[key] = value;
  }
  return out;
}

// E2B names snapshot templates per team: a name unique to this sandbox avoids adding a build to
// somebody else's snapshot of the same name.
std::string snapshot_name(const std::string& sandbox_id, const std::string& name) {
  std::string out;
  for (char c : sandbox_id + "-" + name) {
    char lower = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out += std::isalnum(static_cast<unsigned char>(lower)) ? lower : '-';
  }
  return out;
}

// What envd's EndEvent says about how the command ended, as a shell would: the exit code, or
// 128+N for a signal ("signal: killed").
int exit_status_of(const json& end) {
  bool exited = end.contains("exited") && end["exited"].is_boolean() && end["exited"].get<bool>();
  int code = end.contains("exitCode") && end["exitCode"].is_number_integer()
                 ? end["exitCode"].get<int>()
                 : 0; // proto3 JSON leaves a zero out
  if (exited || code > 0) {
    return code;
  }
  std::string status = text_of(end, "status");
  static const std::vector<std::pair<std::string, int>> k_signals = {
      {"hangup", 1}, {"interrupt", 2},           {"quit", 3},         {"aborted", 6},
      {"killed", 9}, {"segmentation fault", 11}, {"broken pipe", 13}, {"terminated", 15}};
  for (const auto& [word, number] : k_signals) {
    if (status.find("signal: " + word) != std::string::npos) {
      return 128 + number;
    }
  }
  return code < 0 ? 255 : code;
}

Kind kind_of_connect_code(const std::string& code) {
  if (code == "unauthenticated" || code == "permission_denied") {
    return Kind::auth;
  }
  if (code == "not_found") {
    return Kind::not_found;
  }
  if (code == "deadline_exceeded") {
    return Kind::timeout;
  }
  return Kind::error;
}

// E2B gives each port of a sandbox a host of its own on its proxy (the SDKs' getHost:
// PORT-SANDBOXID.DOMAIN), TCP only, nothing bound on this machine.
std::vector<PortBinding> port_bindings(const std::vector<PortSpec>& ports,
                                       const std::string& sandbox_id, const std::string& domain) {
  std::vector<PortBinding> bindings;
  for (const auto& port : ports) {
    const std::string host = fmt::format("{}-{}.{}", port.port, sandbox_id, domain);
    bindings.push_back({port.port, "tcp", host, std::nullopt, "https://" + host});
  }
  return bindings;
}

class E2bDriver : public Driver {
public:
  E2bDriver(Spec spec, Endpoints endpoints, std::string api_key, const Clock& clock)
      : m_spec(std::move(spec)),
        m_api(http::curl_transport(), std::move(endpoints), std::move(api_key), m_spec),
        m_clock(clock) {}

  CreateResult create(const CreateRequest& request) override {
    if (!request.expires_at) {
      throw DriverError(Kind::invalid_spec,
                        "an E2B sandbox always has a deadline: give the profile a ttl (ttl: none "
                        "is not possible with the e2b driver)");
    }
    refuse_host_side_ports(
        "e2b", "E2B reaches a sandbox's TCP ports through its own host per port (PORT-ID.DOMAIN)",
        request.ports);
    std::string template_id = request.from_snapshot.value_or(m_spec.template_id);
    json body = {{"templateID", template_id},
                 {"timeout", timeout_until(*request.expires_at)},
                 {"autoPause", m_spec.on_expiry == Spec::OnExpiry::pause},
                 {"secure", true},
                 {"metadata", merged(m_spec.metadata, request.labels)},
                 {"envVars", merged(m_spec.env, request.env)}};
    if (m_spec.internet_access) {
      body["allow_internet_access"] = *m_spec.internet_access;
    }
    // Not retried on 5xx or a lost connection: the sandbox may exist already, and a second one
    // would be an orphan. reap --orphans finds such a sandbox by its sandboxer.id metadata.
    auto response = m_api.send("POST", "/sandboxes", body, Retry::once);
    if (response.status != 201 && response.status != 200) {
      m_api.fail(response, fmt::format("create sandbox from template {}", template_id));
    }
    json sandbox = parse(response, "create sandbox");
    std::string id = text_of(sandbox, "sandboxID");
    if (id.empty()) {
      throw DriverError(Kind::error, "E2B create sandbox: the response has no sandboxID");
    }
    remember_token(sandbox);
    CreateResult result;
    result.backend_id = id;
    result.info = {{"template", text_of(sandbox, "templateID", template_id)},
                   {"envd_version", text_of(sandbox, "envdVersion")},
                   {"timeout_s", body["timeout"]}};
    std::string domain = m_api.endpoints().domain;
    if (sandbox.contains("domain") && sandbox["domain"].is_string()) {
      result.info["domain"] = sandbox["domain"];
      domain = sandbox["domain"].get<std::string>();
    }
    result.ports = port_bindings(request.ports, id, domain);
    return result;
  }

  void destroy(const SandboxHandle& sandbox) override {
    auto response =
        m_api.send("DELETE", sandbox_path(sandbox.backend_id), std::nullopt, Retry::idempotent);
    if (response.status == 404) {
      throw DriverError(Kind::not_found,
                        fmt::format("E2B sandbox {} is already gone", sandbox.backend_id));
    }
    if (response.status != 204 && response.status != 200) {
      m_api.fail(response, fmt::format("kill sandbox {}", sandbox.backend_id));
    }
  }

  BackendStatus status(const SandboxHandle& sandbox) override {
    auto response =
        m_api.send("GET", sandbox_path(sandbox.backend_id), std::nullopt, Retry::idempotent);
    if (response.status == 404) {
      return {BackendStatus::State::missing, "E2B has no such sandbox (killed or expired)"};
    }
    if (response.status != 200) {
      m_api.fail(response, fmt::format("get sandbox {}", sandbox.backend_id));
    }
    json detail = parse(response, "get sandbox");
    std::string state = text_of(detail, "state");
    std::string end = text_of(detail, "endAt");
    if (state == "running") {
      return {BackendStatus::State::running, end.empty() ? "running" : "running until " + end};
    }
    if (state == "paused") {
      return {BackendStatus::State::paused, "paused"};
    }
    return {BackendStatus::State::unknown, state};
  }

  SnapshotResult snapshot(const SandboxHandle& sandbox, const SnapshotRequest& request) override {
    if (request.paused) {
      // The spec does not say whether a paused sandbox can be snapshotted: the core resumes it.
      throw DriverError(
          Kind::unsupported,
          fmt::format("E2B cannot snapshot sandbox {} while it is paused", sandbox.backend_id));
    }
    const std::string& name = request.name;
    json body = {{"name", snapshot_name(sandbox.sandbox_id, name)}};
    auto response = m_api.send("POST", sandbox_path(sandbox.backend_id) + "/snapshots", body,
                               Retry::once, k_snapshot_timeout);
    if (response.status != 201 && response.status != 200) {
      m_api.fail(response, fmt::format("snapshot sandbox {}", sandbox.backend_id));
    }
    json info = parse(response, "snapshot sandbox");
    std::string id = text_of(info, "snapshotID");
    if (id.empty()) {
      throw DriverError(Kind::error, "E2B snapshot sandbox: the response has no snapshotID");
    }
    return {id, std::nullopt};
  }

  void delete_snapshot(const std::string& backend_ref) override {
    // A snapshot is a template; its ID carries a tag (":default") that the template path omits.
    std::string template_id = backend_ref.substr(0, backend_ref.rfind(':'));
    auto response = m_api.send("DELETE", "/templates/" + url_escape(template_id), std::nullopt,
                               Retry::idempotent);
    if (response.status != 204 && response.status != 200 && response.status != 404) {
      m_api.fail(response, fmt::format("delete snapshot {}", backend_ref));
    }
  }

  void extend(const SandboxHandle& sandbox, TimePoint new_deadline) override {
    json body = {{"timeout", timeout_until(new_deadline)}};
    auto response =
        m_api.send("POST", sandbox_path(sandbox.backend_id) + "/timeout", body, Retry::idempotent);
    if (response.status == 404) {
      throw DriverError(Kind::not_found,
                        fmt::format("E2B sandbox {} is gone (killed or expired); nothing to "
                                    "extend",
                                    sandbox.backend_id));
    }
    if (response.status != 204 && response.status != 200) {
      m_api.fail(response, fmt::format("set the timeout of sandbox {}", sandbox.backend_id));
    }
  }

  // POST /sandboxes/{id}/pause {memory}: E2B keeps the files, and with memory (its default) the
  // running processes too. A 409 is "already paused" when the sandbox's state says so.
  PauseResult pause(const SandboxHandle& sandbox, const PauseRequest& request) override {
    const bool memory = request.memory.value_or(true);
    const std::string path = sandbox_path(sandbox.backend_id);
    auto response = m_api.send("POST", path + "/pause", json{{"memory", memory}}, Retry::idempotent,
                               k_snapshot_timeout);
    if (response.status == 404) {
      throw DriverError(Kind::not_found, fmt::format("E2B sandbox {} is gone (killed or expired); "
                                                     "nothing to pause",
                                                     sandbox.backend_id));
    }
    if (response.status == 409) {
      const std::string state = settled_state(sandbox, "paused");
      if (state.empty()) {
        throw DriverError(Kind::not_found,
                          fmt::format("E2B sandbox {} is gone (killed or expired); nothing to "
                                      "pause",
                                      sandbox.backend_id));
      }
      if (state != "paused") {
        m_api.fail(response, fmt::format("pause sandbox {}", sandbox.backend_id));
      }
    } else if (response.status != 204 && response.status != 200) {
      m_api.fail(response, fmt::format("pause sandbox {}", sandbox.backend_id));
    }
    PauseResult result;
    // SandboxPauseRequest.memory is implemented; a 409 on a sandbox paused before is taken as
    // the pause asked for (the same pause_id repeated).
    result.memory_kept = memory;
    result.how = "e2b";
    result.info = {{k_paused_by, request.pause_id}};
    return result;
  }

  // POST /sandboxes/{id}/connect {timeout}: 201 resumed, 200 already running (the deprecated
  // /resume answers 409 there). Same id, same URLs; the deadline only ever moves later.
  ResumeResult resume(const SandboxHandle& sandbox, const ResumeRequest& request) override {
    const std::int64_t timeout =
        request.expires_at ? timeout_until(*request.expires_at) : k_resume_for.count();
    json connected = connect(sandbox, timeout, "resume");
    ResumeResult result;
    result.info = {{k_paused_by, nullptr}};
    if (connected.contains("domain") && connected["domain"].is_string()) {
      result.info["domain"] = connected["domain"];
    }
    return result;
  }

  void logs(const SandboxHandle& sandbox, const LogsRequest& request, LogSink& sink) override {
    read_logs(m_api, sandbox.backend_id, request, sink);
  }

  std::vector<RemoteResource> list_remote(const Labels& selector) override {
    std::string query;
    for (const auto& [key, value] : selector) {
      query += (query.empty() ? "" : "&") + url_escape(key) + "=" + url_escape(value);
    }
    std::vector<RemoteResource> found;
    std::optional<std::string> next;
    for (int page = 0;; ++page) {
      std::string path = "/v2/sandboxes?state=running,paused&limit=100";
      if (!query.empty()) {
        path += "&metadata=" + url_escape(query);
      }
      if (next) {
        path += "&nextToken=" + url_escape(*next);
      }
      auto response = m_api.send("GET", path, std::nullopt, Retry::idempotent);
      if (response.status != 200) {
        m_api.fail(response, "list sandboxes");
      }
      json list = parse(response, "list sandboxes");
      if (!list.is_array()) {
        throw DriverError(Kind::error, "E2B list sandboxes: expected a JSON array");
      }
      for (const auto& item : list) {
        RemoteResource resource;
        resource.backend_id = text_of(item, "sandboxID");
        resource.state = text_of(item, "state");
        if (item.contains("metadata") && item["metadata"].is_object()) {
          for (const auto& [key, value] : item["metadata"].items()) {
            if (value.is_string()) {
              resource.labels[key] = value.get<std::string>();
            }
          }
        }
        // The server filters; checking again costs nothing and guards the "never touch what is
        // not ours" rule against a server that ignores the filter.
        bool matches = std::all_of(selector.begin(), selector.end(), [&](const auto& entry) {
          auto it = resource.labels.find(entry.first);
          return it != resource.labels.end() && it->second == entry.second;
        });
        if (matches && !resource.backend_id.empty()) {
          found.push_back(std::move(resource));
        }
      }
      next = response.header("x-next-token");
      if (!next || next->empty() || list.empty()) {
        break;
      }
      if (page > 1000) {
        throw DriverError(Kind::error, "E2B list sandboxes: more than 1000 pages; giving up");
      }
    }
    return found;
  }

  int exec(const SandboxHandle& sandbox, const ExecRequest& request, ExecIo& io) override {
    if (request.attach_stdin) {
      throw DriverError(Kind::unsupported,
                        "exec --interactive (stdin) is not supported by driver e2b yet");
    }
    if (request.argv.empty()) {
      throw DriverError(Kind::invalid_spec, "exec needs a command");
    }
    const std::string user = request.user ? *request.user : m_spec.user;
    if (request.user && (user.find_first_not_of("0123456789") == std::string::npos ||
                         user.find(':') != std::string::npos)) {
      // envd looks the Authorization header's user up by name (Go's user.Lookup): a uid would be
      // "unknown user" from the service.
      throw DriverError(Kind::invalid_spec,
                        fmt::format("exec -u {}: E2B runs commands as a user named in the sandbox "
                                    "(envd looks users up by name), not a uid or uid:gid: use a "
                                    "name such as root or user",
                                    user));
    }
    json sandbox_info = connect_info(sandbox);
    std::optional<std::string> domain;
    if (sandbox_info.contains("domain") && sandbox_info["domain"].is_string()) {
      domain = sandbox_info["domain"].get<std::string>();
    }
    std::string token = text_of(sandbox_info, "envdAccessToken");

    json process = {
        {"cmd", request.argv.front()},
        {"args", std::vector<std::string>(request.argv.begin() + 1, request.argv.end())},
        {"envs", request.env}};
    if (request.workdir) {
      process["cwd"] = *request.workdir;
    }
    http::Request call;
    call.method = "POST";
    call.url = envd_base(m_api.endpoints(), sandbox.backend_id, domain) + "/process.Process/Start";
    call.timeout = m_spec.exec_timeout;
    call.connect_timeout = std::min<std::chrono::milliseconds>(m_spec.request_timeout, 10s);
    call.headers = {{"Content-Type", "application/connect+json"},
                    {"Connect-Protocol-Version", "1"},
                    {"Authorization", "Basic " + base64_encode(user + ":")},
                    {"E2b-Sandbox-Id", sandbox.backend_id},
                    {"E2b-Sandbox-Port", "49983"},
                    // envd then sends keepalive events, so a quiet command's stream is not cut
                    // by a proxy's idle timeout.
                    {"Keepalive-Ping-Interval", "50"},
                    {"User-Agent", "sandboxer"}};
    if (!token.empty()) {
      call.headers.emplace_back("X-Access-Token", token);
    }
    call.body = connect::envelope({{"process", process}, {"stdin", false}});

    std::optional<int> exit_status;
    std::optional<std::string> stream_error;
    Kind stream_error_kind = Kind::error;
    connect::Decoder decoder([&](std::uint8_t flags, const json& message) {
      if (flags & connect::k_end_stream) {
        if (message.contains("error") && message["error"].is_object()) {
          const json& error = message["error"];
          std::string code = text_of(error, "code", "unknown");
          stream_error = fmt::format("{} (code {})", text_of(error, "message"), code);
          stream_error_kind = kind_of_connect_code(code);
        }
        return;
      }
      const json event = message.value("event", json::object());
      if (event.contains("data")) {
        const json& data = event["data"];
        if (data.contains("stdout")) {
          io.out(base64_decode(data["stdout"].get<std::string>()));
        } else if (data.contains("stderr")) {
          io.err(base64_decode(data["stderr"].get<std::string>()));
        } else if (data.contains("pty")) {
          io.out(base64_decode(data["pty"].get<std::string>()));
        }
      } else if (event.contains("end")) {
        exit_status = exit_status_of(event["end"]);
      }
    });
    // Nothing may be thrown through libcurl's C callback: keep the exception, stop the transfer,
    // and rethrow it once curl has returned.
    std::exception_ptr failure;
    call.on_body = [&](std::string_view bytes) {
      try {
        decoder.feed(bytes);
        return true;
      } catch (...) {
        failure = std::current_exception();
        return false;
      }
    };
    http::Response response;
    try {
      response = m_api.transport().send(call);
    } catch (const DriverError& e) {
      throw DriverError(e.kind(),
                        fmt::format("E2B exec in sandbox {}: {}", sandbox.backend_id, e.what()));
    } catch (const std::invalid_argument&) {
      throw DriverError(Kind::error, "E2B exec: envd sent output that is not valid base64");
    }
    if (response.status != 200) {
      auto parsed = json::parse(decoder.raw(), nullptr, false);
      std::string code = text_of(parsed, "code");
      std::string message = parsed.is_object() ? text_of(parsed, "message") : decoder.raw();
      std::replace(message.begin(), message.end(), '\n', ' ');
      Kind kind = code.empty() ? http::kind_of_status(response.status) : kind_of_connect_code(code);
      throw DriverError(kind,
                        fmt::format("E2B exec in sandbox {}: {} (HTTP {}{})", sandbox.backend_id,
                                    message.empty() ? "no error message" : message, response.status,
                                    code.empty() ? "" : ", code " + code));
    }
    if (stream_error && stream_error->rfind("error starting process", 0) == 0) {
      // envd could not start the program (Go's exec: not found, or not executable): the shell's
      // 127 or 126, as every driver answers (docs/exit-codes.md).
      std::string lower = *stream_error;
      std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
      return unstartable_command(request.argv.front(),
                                 lower.find("permission denied") == std::string::npos, io);
    }
    if (stream_error) {
      throw DriverError(stream_error_kind, fmt::format("E2B exec in sandbox {}: {}",
                                                       sandbox.backend_id, *stream_error));
    }
    if (decoder.malformed()) {
      throw DriverError(Kind::error, fmt::format("E2B exec in sandbox {}: envd's answer is not a "
                                                 "Connect stream",
                                                 sandbox.backend_id));
    }
    if (!exit_status) {
      throw DriverError(Kind::error,
                        fmt::format("E2B exec in sandbox {}: the stream ended without the "
                                    "command's exit status",
                                    sandbox.backend_id));
    }
    return *exit_status;
  }

  PathInfo stat_path(const SandboxHandle& sandbox, const std::string& path) override {
    return stat_in_sandbox(runner(sandbox), path);
  }

  void copy_in(const SandboxHandle& sandbox, const CopyInRequest& request,
               CopySource& source) override {
    copy_into_sandbox(envd_of(sandbox), runner(sandbox), request, source);
  }

  void copy_out(const SandboxHandle& sandbox, const CopyOutRequest& request,
                CopySink& sink) override {
    copy_out_of_sandbox(envd_of(sandbox), runner(sandbox), request, sink);
  }

private:
  // Seconds from now until `deadline` plus the grace, at least the grace: E2B's timer then fires
  // only after sandboxer's reaper had its chance.
  std::int64_t timeout_until(TimePoint deadline) const {
    auto left = std::chrono::duration_cast<std::chrono::seconds>(deadline - m_clock.now());
    return std::max<std::int64_t>(left.count(), 0) + m_spec.ttl_grace.count();
  }

  static json parse(const http::Response& response, const std::string& what) {
    auto parsed = json::parse(response.body, nullptr, false);
    if (parsed.is_discarded()) {
      throw DriverError(Kind::error, fmt::format("E2B {}: the response is not JSON", what));
    }
    return parsed;
  }

  // envd's access token is a credential of the sandbox: redacted from every log line and error.
  static void remember_token(const json& sandbox) {
    if (sandbox.contains("envdAccessToken") && sandbox["envdAccessToken"].is_string()) {
      log::add_secret(sandbox["envdAccessToken"].get<std::string>());
    }
  }

  // POST /sandboxes/{id}/connect: the sandbox's details with a fresh envd token, resuming it if
  // it is paused. A 409 (E2B is still pausing it) is waited out for a while.
  json connect(const SandboxHandle& sandbox, std::int64_t timeout, const std::string& verb) {
    const std::string path = sandbox_path(sandbox.backend_id) + "/connect";
    const auto until = std::chrono::steady_clock::now() + k_settle_for;
    while (true) {
      auto response = m_api.send("POST", path, json{{"timeout", timeout}}, Retry::idempotent,
                                 k_snapshot_timeout);
      if (response.status == 404) {
        throw DriverError(Kind::not_found,
                          fmt::format("E2B sandbox {} is gone (killed or expired); nothing to {}",
                                      sandbox.backend_id, verb));
      }
      if (response.status == 409 && std::chrono::steady_clock::now() < until) {
        m_api.sleeper()(std::chrono::seconds(1));
        continue;
      }
      if (response.status != 200 && response.status != 201) {
        m_api.fail(response, fmt::format("{} sandbox {}", verb, sandbox.backend_id));
      }
      json connected = parse(response, verb + " sandbox");
      remember_token(connected);
      return connected;
    }
  }

  // The sandbox's state once E2B is done changing it: asked again each second while it is not
  // `wanted`, for at most k_settle_for ("" when it is gone).
  std::string settled_state(const SandboxHandle& sandbox, const std::string& wanted) {
    const auto until = std::chrono::steady_clock::now() + k_settle_for;
    while (true) {
      auto response =
          m_api.send("GET", sandbox_path(sandbox.backend_id), std::nullopt, Retry::idempotent);
      if (response.status == 404) {
        return "";
      }
      if (response.status != 200) {
        m_api.fail(response, fmt::format("get sandbox {}", sandbox.backend_id));
      }
      std::string state = text_of(parse(response, "get sandbox"), "state");
      if (state == wanted || std::chrono::steady_clock::now() >= until) {
        return state;
      }
      m_api.sleeper()(std::chrono::seconds(1));
    }
  }

  // The details of a running sandbox with its envd token, for exec and copies. A paused one is
  // the core's to resume (`sandboxer resume`, or resume: {on_exec: true}): exec never resumes
  // it behind the ledger's back. The one exception is a sandbox E2B paused itself at its own
  // deadline (on_expiry: pause, which the ledger does not see): that one is resumed, as the
  // profile asked, with a warning.
  json connect_info(const SandboxHandle& sandbox) {
    auto response =
        m_api.send("GET", sandbox_path(sandbox.backend_id), std::nullopt, Retry::idempotent);
    if (response.status == 404) {
      throw DriverError(Kind::not_found, fmt::format("E2B sandbox {} is gone (killed or expired)",
                                                     sandbox.backend_id));
    }
    if (response.status != 200) {
      m_api.fail(response, fmt::format("get sandbox {}", sandbox.backend_id));
    }
    json detail = parse(response, "get sandbox");
    remember_token(detail);
    if (text_of(detail, "state") != "paused") {
      return detail;
    }
    const bool paused_by_us = sandbox.info.is_object() && sandbox.info.contains(k_paused_by) &&
                              sandbox.info[k_paused_by].is_string();
    if (paused_by_us || m_spec.on_expiry != Spec::OnExpiry::pause) {
      throw DriverError(Kind::conflict,
                        fmt::format("E2B sandbox {} is paused: 'sandboxer resume {}' resumes it "
                                    "(or resume: {{on_exec: true}} in its profile)",
                                    sandbox.backend_id, sandbox.sandbox_id));
    }
    spdlog::warn("{}: E2B paused sandbox {} at its own deadline (e2b.on_expiry: pause); resuming "
                 "it for {}s",
                 sandbox.sandbox_id, sandbox.backend_id, k_resume_for.count());
    return connect(sandbox, k_resume_for.count(), "resume");
  }

  // envd's file API of one running sandbox, as the spec's user.
  Envd envd_of(const SandboxHandle& sandbox) {
    json info = connect_info(sandbox);
    std::optional<std::string> domain;
    if (info.contains("domain") && info["domain"].is_string()) {
      domain = info["domain"].get<std::string>();
    }
    Envd envd;
    envd.transport = &m_api.transport();
    envd.base = envd_base(m_api.endpoints(), sandbox.backend_id, domain);
    envd.sandbox_id = sandbox.backend_id;
    envd.token = text_of(info, "envdAccessToken");
    envd.user = m_spec.user;
    envd.request_timeout = m_spec.request_timeout;
    envd.retries = m_spec.retries;
    envd.sleep = m_api.sleeper();
    return envd;
  }

  // Commands of a copy, through exec: stdout streamed to the caller, stderr kept for its message.
  RunInSandbox runner(const SandboxHandle& sandbox) {
    return [this, sandbox](const std::vector<std::string>& argv,
                           const std::function<void(std::string_view)>& out, std::string& err) {
      class CopyCommandIo : public ExecIo {
      public:
        CopyCommandIo(const std::function<void(std::string_view)>& on_out, std::string& err_text)
            : m_out(on_out), m_err(err_text) {}
        void out(std::string_view bytes) override { m_out(bytes); }
        void err(std::string_view bytes) override {
          m_err.append(bytes.substr(0, std::min<std::size_t>(bytes.size(), 4096)));
        }

      private:
        const std::function<void(std::string_view)>& m_out;
        std::string& m_err;
      } io(out, err);
      return exec(sandbox, ExecRequest{.argv = argv}, io);
    };
  }

  // A TCP connection to E2B's proxy always opens; what is behind it shows in its answer to a GET
  // of the port's URL (502 while nothing listens on the port).
  bool port_answers(const SandboxHandle&, const PortBinding& binding,
                    std::chrono::milliseconds timeout) override {
    return url_answers(m_api.transport(), binding.url, timeout);
  }

  Spec m_spec;
  Api m_api;
  const Clock& m_clock;
};

class E2bFactory : public spec::TableFactory<Spec> {
public:
  std::string_view name() const override { return "e2b"; }
  std::string_view doc() const override {
    return "E2B cloud sandboxes over E2B's REST API; exec through envd (needs secrets.api_key)";
  }
  Capabilities capabilities() const override {
    return {.snapshot = true,
            .exec = true,
            .native_ttl = true,
            .list_by_label = true,
            .exec_user = true,
            .logs = true,
            .copy = true,
            .ports = true,
            .port_reach = Capabilities::PortReach::public_url,
            .pause = true};
  }
  json location(const json& spec, const DriverContext&) const override {
    Endpoints endpoints = resolve_endpoints(bind(spec));
    return {{"api_url", endpoints.api_url}, {"domain", endpoints.domain}};
  }
  std::unique_ptr<Driver> open(const json& spec_json, const DriverContext& context) const override {
    Spec spec = bind(spec_json);
    auto key = context.secrets.find("api_key");
    if (key == context.secrets.end()) {
      throw DriverError(Kind::invalid_spec,
                        "driver e2b needs an API key: add \"secrets: {api_key: {env: "
                        "E2B_API_KEY}}\" (or {file: PATH}) to the profile");
    }
    check_api_key(key->second);
    // Where the record says the sandbox lives, over E2B_API_URL/E2B_DOMAIN of today.
    if (auto api_url = context.location.find("api_url"); api_url != context.location.end()) {
      spec.api_url = api_url->get<std::string>();
    }
    if (auto domain = context.location.find("domain"); domain != context.location.end()) {
      spec.domain = domain->get<std::string>();
    }
    Endpoints endpoints = resolve_endpoints(spec);
    return std::make_unique<E2bDriver>(std::move(spec), std::move(endpoints), key->second,
                                       context.clock ? *context.clock : system_clock());
  }

protected:
  const spec::Table<Spec>& spec_table() const override { return e2b::spec_table(); }
};

} // namespace

const DriverFactory& e2b_factory() {
  static const E2bFactory factory;
  return factory;
}

} // namespace sandboxer::drivers::e2b
