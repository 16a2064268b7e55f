#include "drivers/modal/modal_driver.hpp"

#include <cmath>
#include <fmt/format.h>
#include <map>
#include <mutex>

#include <sandboxer/duration.hpp>
#include <sandboxer/endpoint.hpp>
#include <sandboxer/interrupt.hpp>
#include <sandboxer/log.hpp>
#include <sandboxer/ports.hpp>
#include <sandboxer/readiness.hpp>
#include <sandboxer/spec_fields.hpp>

#include "drivers/modal/api_client.hpp"
#include "drivers/modal/exec.hpp"
#include "drivers/modal/logs.hpp"

namespace sandboxer::drivers::modal {
namespace {

using nlohmann::json;
using Kind = DriverError::Kind;
namespace api = ::modal::client;
namespace router = ::modal::task_command_router;
using Stub = api::ModalClient::Stub;

constexpr auto k_task_poll = std::chrono::milliseconds(500);
// ImageJoinStreaming's own wait per call, as the SDKs send it.
constexpr float k_join_timeout_secs = 55;

const char* status_name(api::GenericResult::GenericStatus status) {
  switch (status) {
  case api::GenericResult::GENERIC_STATUS_SUCCESS:
    return "succeeded";
  case api::GenericResult::GENERIC_STATUS_FAILURE:
    return "failed";
  case api::GenericResult::GENERIC_STATUS_TERMINATED:
    return "terminated";
  case api::GenericResult::GENERIC_STATUS_TIMEOUT:
    return "reached its timeout";
  case api::GenericResult::GENERIC_STATUS_INIT_FAILURE:
    return "failed to start";
  case api::GenericResult::GENERIC_STATUS_IDLE_TIMEOUT:
    return "reached its idle timeout";
  default:
    return "ended";
  }
}

std::string result_text(const api::GenericResult& result) {
  std::string text = status_name(result.status());
  if (!result.exception().empty()) {
    text += ": " + log::redact(result.exception());
  }
  return text;
}

double unix_seconds(TimePoint t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

// Modal has no pause: sandboxer's is a filesystem snapshot, then the end of the sandbox; resume
// makes a new one from the snapshot. The paused sandbox carries the snapshot's image id in a tag
// (set before it is terminated), so a pause cut short, or a record that never learnt the image,
// finds it again; the new sandbox carries the pause's id, so a resume cut short finds what it
// made.
constexpr const char* k_pause_image_tag = "sandboxer.pause_image";
constexpr const char* k_pause_id_tag = "sandboxer.pause_id";
// How long a pause's snapshot outlives the paused deadline (ttl.paused_max) it was asked to last.
constexpr std::chrono::hours k_pause_image_margin{24};

// The snapshot_id of a pause (TaskSnapshotFilesystem's idempotency key): the same for every
// attempt of that pause, so a repeat after a lost answer gets the same image, not a second one.
// Written as a version-4 UUID, the form the SDKs send, in case the server checks it.
std::string pause_snapshot_id(const std::string& sandbox_id, const std::string& pause_id) {
  const std::string name = "sandboxer-pause:" + sandbox_id + ":" + pause_id;
  std::uint64_t halves[2] = {0xcbf29ce484222325ULL, 0x84222325cbf29ce4ULL};
  for (auto& hash : halves) {
    for (unsigned char c : name) {
      hash = (hash ^ c) * 0x100000001b3ULL;
    }
    hash ^= hash >> 29; // FNV's low bits mix poorly on their own
    hash *= 0xbf58476d1ce4e5b9ULL;
    hash ^= hash >> 32;
  }
  std::string hex = fmt::format("{:016x}{:016x}", halves[0], halves[1]);
  hex[12] = '4';
  hex[16] = "89ab"[hex[16] % 4];
  return hex.substr(0, 8) + "-" + hex.substr(8, 4) + "-" + hex.substr(12, 4) + "-" +
         hex.substr(16, 4) + "-" + hex.substr(20, 12);
}

// The pause image the record's info holds (set by pause, cleared by resume), or "".
std::string recorded_pause_image(const SandboxHandle& sandbox) {
  if (sandbox.info.is_object()) {
    auto found = sandbox.info.find("pause_image");
    if (found != sandbox.info.end() && found->is_string()) {
      return found->get<std::string>();
    }
  }
  return "";
}

std::string paused_detail(const std::string& image) {
  return fmt::format("emulated: filesystem snapshot {}, sandbox terminated; processes do not "
                     "survive",
                     image);
}

class ModalDriver : public Driver {
public:
  ModalDriver(Spec spec, const Token& token, const DriverContext& context)
      : m_spec(std::move(spec)), m_token(token), m_api(m_spec, resolve_server_url(m_spec), token),
        m_stub(api::ModalClient::NewStub(m_api.channel())),
        m_environment(resolve_environment(m_spec)),
        m_clock(context.clock ? *context.clock : system_clock()), m_progress(*context.progress) {}

  CreateResult create(const CreateRequest& request) override {
    const std::string app_id = app();
    const std::string image_id = request.from_snapshot ? *request.from_snapshot : image(app_id);
    const auto now = m_clock.now();
    const std::chrono::seconds timeout = lifetime(request, now);

    api::SandboxCreateRequest create;
    create.set_app_id(app_id);
    auto& definition = *create.mutable_definition();
    for (const auto& arg : m_spec.command) {
      definition.add_entrypoint_args(arg);
    }
    definition.set_image_id(image_id);
    definition.set_timeout_secs(static_cast<std::uint32_t>(timeout.count()));
    if (m_spec.idle_timeout) {
      definition.set_idle_timeout_secs(static_cast<std::uint32_t>(m_spec.idle_timeout->count()));
    }
    if (m_spec.workdir) {
      definition.set_workdir(*m_spec.workdir);
    }
    if (m_spec.milli_cpu) {
      definition.mutable_resources()->set_milli_cpu(*m_spec.milli_cpu);
    }
    if (m_spec.memory_mb) {
      definition.mutable_resources()->set_memory_mb(*m_spec.memory_mb);
    }
    // ports: Modal reaches them through TLS tunnels of its own, one host each.
    refuse_host_side_ports("modal",
                           "Modal reaches a sandbox's TCP ports through a tunnel host of its own",
                           request.ports);
    for (const auto& port : request.ports) {
      definition.mutable_open_ports()->add_ports()->set_port(static_cast<std::uint32_t>(port.port));
    }
    auto& network = *definition.mutable_network_access();
    if (m_spec.network == "open") {
      network.set_network_access_type(api::NetworkAccess::OPEN);
    } else if (m_spec.network == "allowlist") {
      network.set_network_access_type(api::NetworkAccess::ALLOWLIST);
      for (const auto& cidr : m_spec.allowed_cidrs) {
        network.add_allowed_cidrs(cidr);
      }
    } else {
      network.set_network_access_type(api::NetworkAccess::BLOCKED);
      definition.set_block_network(true);
    }
    // The ownership tags go with the create itself: a sandbox whose create was cut off after
    // Modal made it is still found by `reap --orphans` (list_remote by these tags).
    auto tags = m_spec.tags;
    for (const auto& [key, value] : request.labels) {
      tags[key] = value;
    }
    for (const auto& [key, value] : tags) {
      auto* tag = create.add_tags();
      tag->set_tag_name(key);
      tag->set_tag_value(value);
    }
    m_progress.update(fmt::format("creating a Modal sandbox in app {}", m_spec.app));
    api::SandboxCreateResponse created;
    // An attempt whose answer was lost (a reset after Modal made the sandbox) is looked for by
    // its sandboxer.id tag before the create is repeated: one sandbox per record.
    auto made_already = [&] {
      std::vector<RemoteResource> found;
      try {
        found = list_remote({{"sandboxer.id", request.sandbox_id}});
      } catch (const DriverError& e) {
        spdlog::debug("modal: cannot tell whether the lost create took effect: {}", e.what());
        return false; // the retry goes on; the engine's sweep after a failure finds any leftover
      }
      if (found.empty()) {
        return false;
      }
      created.set_sandbox_id(found.front().backend_id);
      return true;
    };
    m_api.unary(
        "SandboxCreate", m_spec.call_timeout,
        [&](grpc::ClientContext& context) {
          return m_stub->SandboxCreate(&context, create, &created);
        },
        true, made_already);
    const std::string sandbox_id = created.sandbox_id();
    try {
      const std::string task_id = wait_for_task(sandbox_id);
      json info = {{"app", m_spec.app},
                   {"app_id", app_id},
                   {"image_id", image_id},
                   {"sandbox", sandbox_id},
                   {"task_id", task_id},
                   {"server_url", m_api.url()},
                   {"created_at", unix_seconds(now)},
                   {"timeout_secs", timeout.count()},
                   {"network", m_spec.network},
                   {"environment", m_environment}};
      if (!request.env.empty()) {
        info["env"] = request.env; // given to every exec: a Modal sandbox has no env of its own
      }
      if (request.from_snapshot) {
        info["snapshot"] = *request.from_snapshot;
      }
      return {sandbox_id, info, tunnels_of(sandbox_id, request.ports)};
    } catch (...) {
      // Modal bills the sandbox from SandboxCreate on: never leave one that nothing tracks.
      interrupt::Shield shield;
      try {
        terminate(sandbox_id);
      } catch (const Error& e) {
        spdlog::warn("modal: could not terminate {} after its create failed: {}", sandbox_id,
                     e.what());
      }
      throw;
    }
  }

  void destroy(const SandboxHandle& sandbox) override { terminate(sandbox.backend_id); }

  BackendStatus status(const SandboxHandle& sandbox) override {
    api::SandboxWaitRequest wait;
    wait.set_sandbox_id(sandbox.backend_id);
    wait.set_timeout(0);
    api::SandboxWaitResponse response;
    try {
      m_api.unary("SandboxWait", m_spec.call_timeout, [&](grpc::ClientContext& context) {
        return m_stub->SandboxWait(&context, wait, &response);
      });
    } catch (const DriverError& e) {
      if (e.kind() != Kind::not_found) {
        throw;
      }
      // Modal may forget a finished sandbox: a paused one lasts as long as its image.
      if (std::string image = recorded_pause_image(sandbox); !image.empty()) {
        return paused_or_missing(image);
      }
      return {BackendStatus::State::missing, "Modal does not know this sandbox"};
    }
    if (response.has_result() &&
        response.result().status() != api::GenericResult::GENERIC_STATUS_UNSPECIFIED) {
      // Ended: by a pause when a pause image is known (the record's, else the sandbox's tag, for
      // a pause whose end the record never saw); paused for as long as that image lasts.
      std::string image = recorded_pause_image(sandbox);
      if (image.empty()) {
        image = tag_value(sandbox.backend_id, k_pause_image_tag);
      }
      if (!image.empty()) {
        return paused_or_missing(image);
      }
      return {BackendStatus::State::stopped, result_text(response.result())};
    }
    return {BackendStatus::State::running, "running"};
  }

  // pause_emulated: a filesystem snapshot, its image id in a tag of the sandbox, then the end of
  // the sandbox. Processes and memory are lost: memory true is refused.
  PauseResult pause(const SandboxHandle& sandbox, const PauseRequest& request) override {
    if (request.memory.value_or(false)) {
      throw DriverError(Kind::refused,
                        "modal cannot keep memory; set pause: {memory: false}: Modal has no "
                        "pause, so sandboxer keeps the files (a filesystem snapshot) and ends the "
                        "sandbox, and resume makes a new one from them");
    }
    auto tags = tags_of(sandbox.backend_id); // not_found: the sandbox is gone
    std::string image;
    if (tags[k_pause_id_tag] == request.pause_id) {
      image = tags[k_pause_image_tag]; // this pause got as far as the tag before
    }
    if (auto ended = image.empty() ? result_of(sandbox.backend_id) : std::nullopt) {
      // Ended: paused already by another pause (its image in the tag), else its files are gone.
      image = tags[k_pause_image_tag];
      if (image.empty()) {
        throw DriverError(Kind::not_found,
                          fmt::format("Modal sandbox {} has ended (it {}): its files are gone, "
                                      "there is nothing to pause",
                                      sandbox.backend_id, result_text(*ended)));
      }
    } else if (image.empty()) {
      image = filesystem_snapshot(sandbox, pause_snapshot_id(sandbox.sandbox_id, request.pause_id),
                                  pause_image_ttl(request.keep_until));
      tags[k_pause_image_tag] = image;
      tags[k_pause_id_tag] = request.pause_id;
      set_tags(sandbox.backend_id, tags);
    }
    m_progress.update(fmt::format("terminating Modal sandbox {} (its files are in {})",
                                  sandbox.backend_id, image));
    terminate(sandbox.backend_id);
    PauseResult result;
    result.memory_kept = false;
    result.how = "snapshot+terminate";
    result.info = {{"pause_image", image}};
    return result;
  }

  // A new sandbox from the pause's image: the same sandboxer.id, the request's labels and ports,
  // Modal's lifetime from the running deadline. Its id, task and tunnels are new.
  ResumeResult resume(const SandboxHandle& sandbox, const ResumeRequest& request) override {
    std::string image = recorded_pause_image(sandbox);
    std::optional<api::GenericResult> ended;
    try {
      ended = result_of(sandbox.backend_id);
      if (image.empty() && ended) {
        image = tag_value(sandbox.backend_id, k_pause_image_tag);
      }
    } catch (const DriverError& e) {
      // Modal may forget a finished sandbox; the image recorded at the pause is what counts.
      if (e.kind() != Kind::not_found || image.empty()) {
        throw;
      }
      ended = api::GenericResult();
    }
    if (!ended) {
      return {}; // still running: never paused, or a pause cut short before the terminate
    }
    if (image.empty()) {
      throw DriverError(Kind::not_found,
                        fmt::format("Modal sandbox {} has ended and no filesystem snapshot of a "
                                    "pause of it is known: there is nothing to resume",
                                    sandbox.backend_id));
    }
    // What a resume cut short made is not in the record: it goes, and this one is made anew.
    for (const auto& leftover :
         list_remote({{"sandboxer.id", sandbox.sandbox_id}, {k_pause_id_tag, request.pause_id}})) {
      if (leftover.backend_id != sandbox.backend_id) {
        spdlog::info("modal: terminating {}, made by an earlier attempt of this resume",
                     leftover.backend_id);
        terminate(leftover.backend_id);
      }
    }
    if (!image_exists(image)) {
      throw DriverError(Kind::not_found,
                        fmt::format("the filesystem snapshot {} of paused sandbox {} is gone "
                                    "(expired or deleted): its files are lost",
                                    image, sandbox.sandbox_id));
    }
    CreateRequest create_request;
    create_request.sandbox_id = sandbox.sandbox_id;
    create_request.name = sandbox.sandbox_id;
    create_request.labels = request.labels;
    create_request.labels["sandboxer.id"] = sandbox.sandbox_id;
    create_request.labels[k_pause_id_tag] = request.pause_id;
    if (sandbox.info.contains("env") && sandbox.info["env"].is_object()) {
      create_request.env = sandbox.info["env"].get<std::map<std::string, std::string>>();
    }
    create_request.expires_at = request.expires_at;
    create_request.from_snapshot = image;
    create_request.ports = request.ports;
    CreateResult made = create(create_request);
    ResumeResult result;
    result.backend_id = made.backend_id;
    result.info = made.info;
    result.info["pause_image"] = nullptr;
    result.info["resumed_from"] = image;
    result.ports = made.ports;
    return result;
  }

  SnapshotResult snapshot(const SandboxHandle& sandbox, const SnapshotRequest& request) override {
    if (request.paused) {
      // A paused sandbox is its pause's snapshot already (the sandbox itself has ended).
      std::string image = recorded_pause_image(sandbox);
      if (image.empty()) {
        image = tag_value(sandbox.backend_id, k_pause_image_tag);
      }
      if (image.empty()) {
        throw DriverError(Kind::unsupported,
                          fmt::format("Modal sandbox {} is paused but its pause image is not "
                                      "known",
                                      sandbox.backend_id));
      }
      return {image, std::nullopt};
    }
    return {filesystem_snapshot(sandbox, random_uuid(),
                                m_spec.snapshot_ttl ? m_spec.snapshot_ttl->count() : -1),
            std::nullopt};
  }

  void delete_snapshot(const std::string& backend_ref) override {
    // Modal has no call that deletes an image: a snapshot's image expires by itself after
    // modal.snapshot_ttl. Forgetting it in the ledger is all there is to do.
    spdlog::debug("modal: image {} is left to expire (snapshot_ttl {})", backend_ref,
                  m_spec.snapshot_ttl ? format_duration(*m_spec.snapshot_ttl) : "never");
  }

  int exec(const SandboxHandle& sandbox, const ExecRequest& request, ExecIo& io) override {
    if (std::string image = recorded_pause_image(sandbox); !image.empty()) {
      throw DriverError(Kind::conflict,
                        fmt::format("Modal sandbox {} is paused ({}): 'sandboxer resume {}' "
                                    "makes it again",
                                    sandbox.backend_id, paused_detail(image), sandbox.sandbox_id));
    }
    const std::string task_id = task_of(sandbox);
    std::map<std::string, std::string> env;
    if (sandbox.info.contains("env") && sandbox.info["env"].is_object()) {
      env = sandbox.info["env"].get<std::map<std::string, std::string>>();
    }
    for (const auto& [key, value] : request.env) {
      env[key] = value;
    }
    if (const Calls* calls = router_for(task_id)) {
      return exec_through_router(*calls, task_id, request, env, io);
    }
    if (!request.env.empty() || request.attach_stdin) {
      throw DriverError(Kind::unsupported,
                        "Modal's older exec (modal.legacy_exec) takes no environment variables "
                        "and no stdin");
    }
    return exec_through_control_plane(m_api, *m_stub, task_id, request, io);
  }

  // The entrypoint's stdout and stderr as Modal keeps them (SandboxGetLogs); not exec's output.
  void logs(const SandboxHandle& sandbox, const LogsRequest& request, LogSink& sink) override {
    read_logs(m_api, *m_stub, sandbox.backend_id, request, sink);
  }

  // Modal fixes a sandbox's lifetime at create: the ledger's deadline may move up to it, never
  // past it.
  void extend(const SandboxHandle& sandbox, TimePoint new_deadline) override {
    const double created = sandbox.info.value("created_at", 0.0);
    const long long timeout = sandbox.info.value("timeout_secs", 0LL);
    const auto cap = TimePoint(std::chrono::duration_cast<TimePoint::duration>(
        std::chrono::duration<double>(created) + std::chrono::seconds(timeout)));
    if (new_deadline > cap) {
      throw DriverError(
          Kind::refused,
          fmt::format("Modal cannot extend sandbox {} beyond the lifetime it was created with "
                      "({}, until {}): Modal stops it then. Snapshot it and restore from the "
                      "snapshot for more time, or set modal.timeout (up to 24h) in the profile "
                      "for the next ones",
                      sandbox.sandbox_id, format_duration(std::chrono::seconds(timeout)),
                      format_time(cap)));
    }
  }

  // A tunnel's TLS endpoint is Modal's and always accepts: what is behind it shows in the answer
  // to a GET of its URL (a 502, 503 or 504 while nothing listens on the port).
  bool port_answers(const SandboxHandle&, const PortBinding& binding,
                    std::chrono::milliseconds timeout) override {
    return url_answers(http::curl_transport(), binding.url, timeout);
  }

  std::vector<RemoteResource> list_remote(const Labels& selector) override {
    std::vector<RemoteResource> found;
    double before = 0;
    while (true) {
      api::SandboxListRequest list;
      list.set_environment_name(m_environment);
      list.set_before_timestamp(before);
      for (const auto& [key, value] : selector) {
        auto* tag = list.add_tags();
        tag->set_tag_name(key);
        tag->set_tag_value(value);
      }
      api::SandboxListResponse page;
      m_api.unary("SandboxList", m_spec.call_timeout, [&](grpc::ClientContext& context) {
        return m_stub->SandboxList(&context, list, &page);
      });
      if (page.sandboxes().empty()) {
        return found;
      }
      for (const auto& info : page.sandboxes()) {
        RemoteResource resource{info.id(), {}, "running"};
        for (const auto& tag : info.tags()) {
          resource.labels[tag.tag_name()] = tag.tag_value();
        }
        found.push_back(std::move(resource));
        before = info.created_at();
      }
    }
  }

private:
  std::string app() {
    api::AppGetOrCreateRequest get;
    get.set_app_name(m_spec.app);
    get.set_environment_name(m_environment);
    get.set_object_creation_type(api::OBJECT_CREATION_TYPE_CREATE_IF_MISSING);
    api::AppGetOrCreateResponse app;
    m_api.unary("AppGetOrCreate", m_spec.call_timeout, [&](grpc::ClientContext& context) {
      return m_stub->AppGetOrCreate(&context, get, &app);
    });
    return app.app_id();
  }

  // The image id of the spec's image: an id as it is, a registry reference built (or found) by
  // Modal, with the build's log lines as progress.
  std::string image(const std::string& app_id) {
    if (is_image_id(m_spec.image)) {
      api::ImageFromIdRequest from;
      from.set_image_id(m_spec.image);
      api::ImageFromIdResponse found;
      m_api.unary("ImageFromId", m_spec.call_timeout, [&](grpc::ClientContext& context) {
        return m_stub->ImageFromId(&context, from, &found);
      });
      return m_spec.image;
    }
    api::ImageGetOrCreateRequest get;
    get.set_app_id(app_id);
    get.mutable_image()->add_dockerfile_commands("FROM " + m_spec.image);
    get.set_builder_version(m_spec.image_builder_version);
    api::ImageGetOrCreateResponse made;
    m_api.unary("ImageGetOrCreate", m_spec.call_timeout, [&](grpc::ClientContext& context) {
      return m_stub->ImageGetOrCreate(&context, get, &made);
    });
    api::GenericResult result = made.result();
    const auto deadline = std::chrono::steady_clock::now() + m_spec.start_timeout;
    std::string last_entry;
    while (result.status() == api::GenericResult::GENERIC_STATUS_UNSPECIFIED) {
      m_progress.update(
          fmt::format("Modal is building image {} ({})", made.image_id(), m_spec.image));
      if (std::chrono::steady_clock::now() > deadline) {
        throw DriverError(Kind::timeout,
                          fmt::format("Modal did not finish building image {} ({}) within {} "
                                      "(modal.start_timeout)",
                                      made.image_id(), m_spec.image,
                                      spec_fields::duration_text(m_spec.start_timeout)));
      }
      result = join_build(made.image_id(), last_entry);
    }
    if (result.status() != api::GenericResult::GENERIC_STATUS_SUCCESS) {
      throw DriverError(Kind::error, fmt::format("Modal's build of image {} ({}) {}", m_spec.image,
                                                 made.image_id(), result_text(result)));
    }
    return made.image_id();
  }

  // One ImageJoinStreaming call: its log lines go to progress; the result, when the stream
  // carried one (else UNSPECIFIED: call again from `last_entry`).
  api::GenericResult join_build(const std::string& image_id, std::string& last_entry) {
    api::ImageJoinStreamingRequest join;
    join.set_image_id(image_id);
    join.set_timeout(k_join_timeout_secs);
    join.set_last_entry_id(last_entry);
    grpc::ClientContext context;
    m_api.prepare(context, std::chrono::seconds(static_cast<int>(k_join_timeout_secs) + 5));
    auto stream = m_stub->ImageJoinStreaming(&context, join);
    api::ImageJoinStreamingResponse message;
    api::GenericResult result;
    while (stream->Read(&message)) {
      if (!message.entry_id().empty()) {
        last_entry = message.entry_id();
      }
      for (const auto& log_line : message.task_logs()) {
        std::string text = log_line.data();
        while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) {
          text.pop_back();
        }
        if (!text.empty()) {
          m_progress.update(log::redact(text));
        }
      }
      if (message.has_result() &&
          message.result().status() != api::GenericResult::GENERIC_STATUS_UNSPECIFIED) {
        result = message.result();
        context.TryCancel();
        break;
      }
    }
    grpc::Status status = stream->Finish();
    if (result.status() == api::GenericResult::GENERIC_STATUS_UNSPECIFIED && !status.ok() &&
        !Calls::retryable(status.error_code())) {
      throw m_api.error("ImageJoinStreaming", status);
    }
    interrupt::check();
    return result;
  }

  // Whole seconds of Modal's own timeout: the spec's, else the TTL; a TTL past the spec's is
  // refused, since Modal would stop the sandbox before the ledger says it expires.
  std::chrono::seconds lifetime(const CreateRequest& request, TimePoint now) const {
    std::optional<std::chrono::seconds> ttl;
    if (request.expires_at) {
      auto left = std::chrono::ceil<std::chrono::seconds>(*request.expires_at - now);
      ttl = std::max(left, std::chrono::seconds(1));
    }
    if (m_spec.timeout) {
      if (ttl && *ttl > *m_spec.timeout) {
        throw DriverError(Kind::refused,
                          fmt::format("a TTL of {} is longer than modal.timeout {}: Modal would "
                                      "stop the sandbox first. Ask for a shorter --ttl or raise "
                                      "modal.timeout (at most 24h)",
                                      format_duration(*ttl), format_duration(*m_spec.timeout)));
      }
      return *m_spec.timeout;
    }
    if (ttl && *ttl > k_max_timeout) {
      throw DriverError(Kind::refused,
                        fmt::format("a TTL of {} is longer than Modal allows a sandbox to live "
                                    "(24h)",
                                    format_duration(*ttl)));
    }
    return ttl.value_or(std::chrono::seconds(300));
  }

  // Where Modal put each asked port: its tunnel (https://HOST, or HOST:PORT off 443).
  std::vector<PortBinding> tunnels_of(const std::string& sandbox_id,
                                      const std::vector<PortSpec>& ports) {
    if (ports.empty()) {
      return {};
    }
    api::SandboxGetTunnelsRequest ask;
    ask.set_sandbox_id(sandbox_id);
    ask.set_timeout(static_cast<float>(
        std::chrono::duration_cast<std::chrono::seconds>(m_spec.call_timeout).count()));
    api::SandboxGetTunnelsResponse answer;
    m_api.unary("SandboxGetTunnels", m_spec.call_timeout, [&](grpc::ClientContext& context) {
      return m_stub->SandboxGetTunnels(&context, ask, &answer);
    });
    std::vector<PortBinding> bindings;
    for (const auto& port : ports) {
      const api::TunnelData* found = nullptr;
      for (const auto& tunnel : answer.tunnels()) {
        if (tunnel.container_port() == static_cast<std::uint32_t>(port.port)) {
          found = &tunnel;
        }
      }
      if (!found || found->host().empty()) {
        throw DriverError(Kind::error,
                          fmt::format("modal: no tunnel for port {} of {}", port.port, sandbox_id));
      }
      const int tls_port = static_cast<int>(found->port());
      bindings.push_back({port.port, "tcp", found->host(), tls_port,
                          tls_port == 443 ? "https://" + found->host()
                                          : fmt::format("https://{}:{}", found->host(), tls_port)});
    }
    return bindings;
  }

  std::string wait_for_task(const std::string& sandbox_id) {
    m_progress.update(fmt::format("waiting for Modal to start sandbox {}", sandbox_id));
    const auto deadline = std::chrono::steady_clock::now() + m_spec.start_timeout;
    while (true) {
      api::SandboxGetTaskIdRequest get;
      get.set_sandbox_id(sandbox_id);
      api::SandboxGetTaskIdResponse task;
      m_api.unary("SandboxGetTaskId", m_spec.call_timeout, [&](grpc::ClientContext& context) {
        return m_stub->SandboxGetTaskId(&context, get, &task);
      });
      if (task.has_task_result() &&
          task.task_result().status() != api::GenericResult::GENERIC_STATUS_UNSPECIFIED) {
        throw DriverError(Kind::error,
                          fmt::format("Modal sandbox {} ended before it started: it {}", sandbox_id,
                                      result_text(task.task_result())));
      }
      if (task.has_task_id() && !task.task_id().empty()) {
        return task.task_id();
      }
      if (std::chrono::steady_clock::now() + k_task_poll > deadline) {
        throw DriverError(Kind::timeout,
                          fmt::format("Modal did not start sandbox {} within {} "
                                      "(modal.start_timeout)",
                                      sandbox_id,
                                      spec_fields::duration_text(m_spec.start_timeout)));
      }
      interrupt::sleep_for(k_task_poll);
    }
  }

  // The task create() saw, when it is of this very sandbox; else Modal says (not_found for a
  // sandbox it does not know).
  std::string task_of(const SandboxHandle& sandbox) {
    if (sandbox.info.value("sandbox", std::string()) == sandbox.backend_id &&
        sandbox.info.contains("task_id") && sandbox.info["task_id"].is_string()) {
      return sandbox.info["task_id"].get<std::string>();
    }
    return wait_for_task(sandbox.backend_id);
  }

  BackendStatus paused_or_missing(const std::string& image) {
    if (image_exists(image)) {
      return {BackendStatus::State::paused, paused_detail(image)};
    }
    return {BackendStatus::State::missing,
            fmt::format("paused, but its filesystem snapshot {} is gone (expired or deleted): "
                        "the files are lost",
                        image)};
  }

  // A filesystem snapshot of the sandbox's task: through the command router (snapshot_id is
  // Modal's idempotency key), else the legacy control-plane call. Returns the image id.
  std::string filesystem_snapshot(const SandboxHandle& sandbox, const std::string& snapshot_id,
                                  std::int64_t ttl_seconds) {
    const std::string task_id = task_of(sandbox);
    m_progress.update(fmt::format("snapshotting the filesystem of {}", sandbox.sandbox_id));
    if (const Calls* calls = router_for(task_id)) {
      router::TaskSnapshotFilesystemRequest snap;
      snap.set_task_id(task_id);
      snap.set_snapshot_id(snapshot_id);
      snap.set_ttl_seconds(ttl_seconds);
      router::TaskSnapshotFilesystemResponse done;
      auto stub = router::TaskCommandRouter::NewStub(calls->channel());
      calls->unary("TaskSnapshotFilesystem", m_spec.snapshot_timeout,
                   [&](grpc::ClientContext& context) {
                     return stub->TaskSnapshotFilesystem(&context, snap, &done);
                   });
      return done.image_id();
    }
    api::SandboxSnapshotFsRequest snap;
    snap.set_sandbox_id(sandbox.backend_id);
    snap.set_timeout(static_cast<float>(m_spec.snapshot_timeout.count()) / 1000);
    api::SandboxSnapshotFsResponse done;
    m_api.unary("SandboxSnapshotFs", m_spec.snapshot_timeout + std::chrono::seconds(5),
                [&](grpc::ClientContext& context) {
                  return m_stub->SandboxSnapshotFs(&context, snap, &done);
                });
    if (done.result().status() != api::GenericResult::GENERIC_STATUS_SUCCESS) {
      throw DriverError(Kind::error, fmt::format("Modal could not snapshot {}: the snapshot {}",
                                                 sandbox.sandbox_id, result_text(done.result())));
    }
    return done.image_id();
  }

  // A pause image lasts a day past the paused deadline it must outlive; without one, as long as
  // the profile's snapshots do (modal.snapshot_ttl).
  std::int64_t pause_image_ttl(const std::optional<TimePoint>& keep_until) const {
    if (keep_until) {
      auto left = std::chrono::ceil<std::chrono::seconds>(*keep_until - m_clock.now());
      return std::max<std::int64_t>(left.count(), 0) +
             std::chrono::duration_cast<std::chrono::seconds>(k_pause_image_margin).count();
    }
    return m_spec.snapshot_ttl ? m_spec.snapshot_ttl->count() : -1;
  }

  // The result of a sandbox that has ended, nullopt while it runs (not_found: Modal does not
  // know it).
  std::optional<api::GenericResult> result_of(const std::string& sandbox_id) {
    api::SandboxWaitRequest wait;
    wait.set_sandbox_id(sandbox_id);
    wait.set_timeout(0);
    api::SandboxWaitResponse response;
    m_api.unary("SandboxWait", m_spec.call_timeout, [&](grpc::ClientContext& context) {
      return m_stub->SandboxWait(&context, wait, &response);
    });
    if (response.has_result() &&
        response.result().status() != api::GenericResult::GENERIC_STATUS_UNSPECIFIED) {
      return response.result();
    }
    return std::nullopt;
  }

  std::map<std::string, std::string> tags_of(const std::string& sandbox_id) {
    api::SandboxTagsGetRequest get;
    get.set_sandbox_id(sandbox_id);
    api::SandboxTagsGetResponse response;
    m_api.unary("SandboxTagsGet", m_spec.call_timeout, [&](grpc::ClientContext& context) {
      return m_stub->SandboxTagsGet(&context, get, &response);
    });
    std::map<std::string, std::string> tags;
    for (const auto& tag : response.tags()) {
      tags[tag.tag_name()] = tag.tag_value();
    }
    return tags;
  }

  // One tag of a sandbox, "" when it has none or Modal does not know the sandbox.
  std::string tag_value(const std::string& sandbox_id, const std::string& name) {
    try {
      auto tags = tags_of(sandbox_id);
      auto found = tags.find(name);
      return found == tags.end() ? "" : found->second;
    } catch (const DriverError& e) {
      if (e.kind() == Kind::not_found) {
        return "";
      }
      throw;
    }
  }

  // All of the sandbox's tags become `tags`: sent whole, whether Modal merges or replaces.
  void set_tags(const std::string& sandbox_id, const std::map<std::string, std::string>& tags) {
    api::SandboxTagsSetRequest set;
    set.set_environment_name(m_environment);
    set.set_sandbox_id(sandbox_id);
    for (const auto& [key, value] : tags) {
      auto* tag = set.add_tags();
      tag->set_tag_name(key);
      tag->set_tag_value(value);
    }
    google::protobuf::Empty done;
    m_api.unary("SandboxTagsSet", m_spec.call_timeout, [&](grpc::ClientContext& context) {
      return m_stub->SandboxTagsSet(&context, set, &done);
    });
  }

  // Whether Modal still has the image (ImageFromId; NOT_FOUND once it expired or was deleted).
  bool image_exists(const std::string& image_id) {
    api::ImageFromIdRequest from;
    from.set_image_id(image_id);
    api::ImageFromIdResponse found;
    try {
      m_api.unary("ImageFromId", m_spec.call_timeout, [&](grpc::ClientContext& context) {
        return m_stub->ImageFromId(&context, from, &found);
      });
    } catch (const DriverError& e) {
      if (e.kind() == Kind::not_found) {
        return false;
      }
      throw;
    }
    return true;
  }

  void terminate(const std::string& sandbox_id) {
    api::SandboxTerminateRequest terminate;
    terminate.set_sandbox_id(sandbox_id);
    api::SandboxTerminateResponse response;
    m_api.unary("SandboxTerminate", m_spec.call_timeout, [&](grpc::ClientContext& context) {
      return m_stub->SandboxTerminate(&context, terminate, &response);
    });
  }

  // The command router of a task, asked for once per task; nullptr when the legacy path is
  // chosen or the server has no router (UNIMPLEMENTED).
  const Calls* router_for(const std::string& task_id) {
    if (m_spec.legacy_exec) {
      return nullptr;
    }
    std::lock_guard lock(m_routers_mutex);
    auto found = m_routers.find(task_id);
    if (found != m_routers.end()) {
      return found->second.get();
    }
    api::TaskGetCommandRouterAccessRequest get;
    get.set_task_id(task_id);
    api::TaskGetCommandRouterAccessResponse access;
    bool unimplemented = false;
    m_api.unary("TaskGetCommandRouterAccess", m_spec.call_timeout,
                [&](grpc::ClientContext& context) {
                  grpc::Status status = m_stub->TaskGetCommandRouterAccess(&context, get, &access);
                  unimplemented = status.error_code() == grpc::StatusCode::UNIMPLEMENTED;
                  return unimplemented ? grpc::Status::OK : status;
                });
    if (unimplemented) {
      spdlog::debug("modal: the server has no command router; using ContainerExec");
      return nullptr;
    }
    log::add_secret(access.jwt());
    // A plaintext router only next to a plaintext loopback server (a local test server).
    if (!access.url().starts_with("https://") &&
        !(m_api.url().starts_with("http://") && access.url().starts_with("http://"))) {
      throw DriverError(Kind::error, fmt::format("Modal gave a command router URL that is not "
                                                 "https ({}); refusing to send its token there",
                                                 access.url()));
    }
    std::string url = checked_endpoint(access.url(), "the command router URL", "token");
    auto calls = std::make_unique<Calls>(m_spec, url, m_token, access.jwt());
    return (m_routers[task_id] = std::move(calls)).get();
  }

  Spec m_spec;
  Token m_token;
  Calls m_api;
  std::unique_ptr<Stub> m_stub;
  std::string m_environment;
  const Clock& m_clock;
  Progress& m_progress;
  std::mutex m_routers_mutex;
  std::map<std::string, std::unique_ptr<Calls>> m_routers;
};

} // namespace

std::unique_ptr<Driver> open_driver(Spec spec, const Token& token, const DriverContext& context) {
  return std::make_unique<ModalDriver>(std::move(spec), token, context);
}

} // namespace sandboxer::drivers::modal
