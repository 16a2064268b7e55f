// ModalClient: apps, image builds that take a few polls, sandboxes with a lifetime, tags, list,
// the legacy exec and snapshot calls.

#include <algorithm>
#include <cctype>
#include <sstream>
#include <thread>
#include <unistd.h>

#include "services.hpp"

namespace fake_modal {
namespace {

namespace api = modal::client;
namespace fs = std::filesystem;
using grpc::ServerContext;
using grpc::Status;
using grpc::StatusCode;

// Waits up to `seconds` (or the client's cancel) for `done()`, polling under the world's lock.
template <class Done>
bool wait_for(World& world, ServerContext* context, double seconds, Done done) {
  auto until = std::chrono::steady_clock::now() +
               std::chrono::milliseconds(static_cast<long>(seconds * 1000));
  while (true) {
    {
      std::lock_guard lock(world.mutex());
      if (done()) {
        return true;
      }
    }
    if (std::chrono::steady_clock::now() >= until || context->IsCancelled()) {
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

class ControlPlane : public api::ModalClient::Service {
public:
  explicit ControlPlane(World& world) : m_world(world) {}

  Status AppGetOrCreate(ServerContext* c, const api::AppGetOrCreateRequest* q,
                        api::AppGetOrCreateResponse* r) override {
    return m_world.call(c, "AppGetOrCreate", *q, r, false, [&] {
      std::lock_guard lock(m_world.mutex());
      std::string key = q->environment_name() + "/" + q->app_name();
      auto& apps = m_world.apps();
      if (!apps.count(key)) {
        if (q->object_creation_type() != api::OBJECT_CREATION_TYPE_CREATE_IF_MISSING) {
          return not_found("App");
        }
        apps[key] = m_world.new_id("ap-");
      }
      r->set_app_id(apps[key]);
      return Status::OK;
    });
  }

  Status ImageGetOrCreate(ServerContext* c, const api::ImageGetOrCreateRequest* q,
                          api::ImageGetOrCreateResponse* r) override {
    return m_world.call(c, "ImageGetOrCreate", *q, r, false, [&] {
      std::lock_guard lock(m_world.mutex());
      const auto& commands = q->image().dockerfile_commands();
      if (commands.size() != 1 || !commands[0].starts_with("FROM ")) {
        return Status(StatusCode::INVALID_ARGUMENT, "expected one FROM command (fake)");
      }
      if (!app_known(q->app_id())) {
        return Status(StatusCode::INVALID_ARGUMENT, "unknown app");
      }
      Image& image = m_world.image_for_ref(commands[0].substr(5));
      r->set_image_id(image.id);
      if (image.built) {
        r->mutable_result()->set_status(api::GenericResult::GENERIC_STATUS_SUCCESS);
      }
      return Status::OK;
    });
  }

  Status ImageJoinStreaming(ServerContext* c, const api::ImageJoinStreamingRequest* q,
                            grpc::ServerWriter<api::ImageJoinStreamingResponse>* w) override {
    return m_world.call(c, "ImageJoinStreaming", *q, nullptr, false, [&] {
      std::unique_lock lock(m_world.mutex());
      auto found = m_world.images().find(q->image_id());
      if (found == m_world.images().end()) {
        return not_found("Image " + q->image_id());
      }
      Image& image = found->second;
      int join = ++image.joins;
      bool ends = image.built || join > m_world.options().build_polls;
      api::ImageJoinStreamingResponse message;
      for (int step = 1; step <= 2; ++step) {
        auto* log = message.add_task_logs();
        log->set_data("Building image " + image.id + ": step " + std::to_string(join) + "." +
                      std::to_string(step) + "\n");
        message.set_entry_id(std::to_string(join * 10 + step));
        lock.unlock();
        w->Write(message);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        lock.lock();
        message.Clear();
      }
      if (ends) {
        auto* result = message.mutable_result();
        if (image.broken) {
          result->set_status(api::GenericResult::GENERIC_STATUS_FAILURE);
          result->set_exception("Image build for " + image.id + " failed (fake)");
        } else {
          image.built = true;
          result->set_status(api::GenericResult::GENERIC_STATUS_SUCCESS);
        }
        message.set_eof(true);
        lock.unlock();
        w->Write(message);
      }
      return Status::OK;
    });
  }

  Status ImageFromId(ServerContext* c, const api::ImageFromIdRequest* q,
                     api::ImageFromIdResponse* r) override {
    return m_world.call(c, "ImageFromId", *q, r, false, [&] {
      std::lock_guard lock(m_world.mutex());
      if (!image_exists(q->image_id())) {
        return not_found("Image " + q->image_id());
      }
      r->set_image_id(q->image_id());
      return Status::OK;
    });
  }

  Status SandboxCreate(ServerContext* c, const api::SandboxCreateRequest* q,
                       api::SandboxCreateResponse* r) override {
    return m_world.call(c, "SandboxCreate", *q, r, false, [&] {
      std::lock_guard lock(m_world.mutex());
      if (!app_known(q->app_id())) {
        return Status(StatusCode::INVALID_ARGUMENT, "unknown app " + q->app_id());
      }
      auto image = m_world.images().find(q->definition().image_id());
      if (!image_exists(q->definition().image_id()) || !image->second.built) {
        return Status(StatusCode::INVALID_ARGUMENT, "unknown image " + q->definition().image_id());
      }
      if (m_world.live_sandboxes() >= m_world.options().max_sandboxes) {
        return Status(StatusCode::RESOURCE_EXHAUSTED, "Sandbox quota exceeded (fake)");
      }
      Sandbox sandbox;
      sandbox.id = m_world.new_id("sb-");
      sandbox.app_id = q->app_id();
      sandbox.image_id = image->first;
      sandbox.definition = q->definition();
      for (const auto& tag : q->tags()) {
        sandbox.tags.emplace_back(tag.tag_name(), tag.tag_value());
      }
      double now = World::now_unix();
      sandbox.created_at = now > m_last_created ? now : m_last_created + 1e-6;
      m_last_created = sandbox.created_at;
      sandbox.created = sandbox.last_activity = std::chrono::steady_clock::now();
      sandbox.dir = m_world.options().state_dir / "sandboxes" / sandbox.id;
      fs::copy(image->second.dir, sandbox.dir, fs::copy_options::recursive);
      r->set_sandbox_id(sandbox.id);
      m_world.sandboxes()[sandbox.id] = std::move(sandbox);
      return Status::OK;
    });
  }

  // One TLS tunnel per open port, on 443 of a host of its own, as Modal answers.
  Status SandboxGetTunnels(ServerContext* c, const api::SandboxGetTunnelsRequest* q,
                           api::SandboxGetTunnelsResponse* r) override {
    return m_world.call(c, "SandboxGetTunnels", *q, r, false, [&] {
      std::lock_guard lock(m_world.mutex());
      Sandbox* sandbox = m_world.sandbox(q->sandbox_id());
      if (!sandbox) {
        return not_found("Sandbox " + q->sandbox_id());
      }
      std::string lower = sandbox->id;
      std::transform(lower.begin(), lower.end(), lower.begin(),
                     [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
      for (const auto& port : sandbox->definition.open_ports().ports()) {
        auto* tunnel = r->add_tunnels();
        tunnel->set_host(lower + "-" + std::to_string(port.port()) + ".r3.modal.host");
        tunnel->set_port(443);
        tunnel->set_container_port(port.port());
      }
      return Status::OK;
    });
  }

  Status SandboxGetTaskId(ServerContext* c, const api::SandboxGetTaskIdRequest* q,
                          api::SandboxGetTaskIdResponse* r) override {
    return m_world.call(c, "SandboxGetTaskId", *q, r, false, [&] {
      std::lock_guard lock(m_world.mutex());
      Sandbox* sandbox = m_world.sandbox(q->sandbox_id());
      if (!sandbox) {
        return not_found("Sandbox " + q->sandbox_id());
      }
      if (sandbox->result) {
        set_result(*r->mutable_task_result(), *sandbox);
      }
      if (sandbox->task_id.empty() && !sandbox->result &&
          ++sandbox->task_polls >= m_world.options().task_polls) {
        sandbox->task_id = m_world.new_id("ta-");
        m_world.start_entrypoint(*sandbox); // the container starts with its task
      }
      if (!sandbox->task_id.empty()) {
        r->set_task_id(sandbox->task_id);
      }
      return Status::OK;
    });
  }

  Status SandboxWait(ServerContext* c, const api::SandboxWaitRequest* q,
                     api::SandboxWaitResponse* r) override {
    return m_world.call(c, "SandboxWait", *q, r, false, [&] {
      bool known = true;
      bool ended = false;
      wait_for(m_world, c, q->timeout(), [&] {
        Sandbox* sandbox = m_world.sandbox(q->sandbox_id());
        known = sandbox != nullptr;
        ended = sandbox && sandbox->result;
        if (ended) {
          set_result(*r->mutable_result(), *sandbox);
        }
        return !known || ended;
      });
      if (!known) {
        return not_found("Sandbox " + q->sandbox_id());
      }
      return Status::OK;
    });
  }

  Status SandboxTerminate(ServerContext* c, const api::SandboxTerminateRequest* q,
                          api::SandboxTerminateResponse* r) override {
    return m_world.call(c, "SandboxTerminate", *q, r, false, [&] {
      std::lock_guard lock(m_world.mutex());
      Sandbox* sandbox = m_world.sandbox(q->sandbox_id());
      if (!sandbox) {
        return not_found("Sandbox " + q->sandbox_id());
      }
      if (sandbox->result) {
        set_result(*r->mutable_existing_result(), *sandbox);
      }
      m_world.finish(*sandbox, api::GenericResult::GENERIC_STATUS_TERMINATED);
      return Status::OK;
    });
  }

  Status SandboxList(ServerContext* c, const api::SandboxListRequest* q,
                     api::SandboxListResponse* r) override {
    return m_world.call(c, "SandboxList", *q, r, false, [&] {
      std::lock_guard lock(m_world.mutex());
      std::vector<Sandbox*> found;
      for (auto& [id, ignored] : m_world.sandboxes()) {
        Sandbox& sandbox = *m_world.sandbox(id);
        if ((!q->app_id().empty() && sandbox.app_id != q->app_id()) ||
            (sandbox.result && !q->include_finished()) ||
            (q->before_timestamp() > 0 && sandbox.created_at >= q->before_timestamp())) {
          continue;
        }
        bool all = true;
        for (const auto& want : q->tags()) {
          bool has = false;
          for (const auto& [name, value] : sandbox.tags) {
            has = has || (name == want.tag_name() && value == want.tag_value());
          }
          all = all && has;
        }
        if (all) {
          found.push_back(&sandbox);
        }
      }
      std::sort(found.begin(), found.end(),
                [](auto* a, auto* b) { return a->created_at > b->created_at; });
      for (size_t i = 0; i < found.size() && i < 10; ++i) { // pages of 10: callers must page
        auto* info = r->add_sandboxes();
        info->set_id(found[i]->id);
        info->set_created_at(found[i]->created_at);
        info->set_app_id(found[i]->app_id);
        info->set_image_id(found[i]->image_id);
        info->set_timeout_secs(found[i]->definition.timeout_secs());
        for (const auto& [name, value] : found[i]->tags) {
          auto* tag = info->add_tags();
          tag->set_tag_name(name);
          tag->set_tag_value(value);
        }
        if (!found[i]->task_id.empty()) {
          info->mutable_task_info()->set_id(found[i]->task_id);
        }
      }
      return Status::OK;
    });
  }

  Status SandboxTagsGet(ServerContext* c, const api::SandboxTagsGetRequest* q,
                        api::SandboxTagsGetResponse* r) override {
    return m_world.call(c, "SandboxTagsGet", *q, r, false, [&] {
      std::lock_guard lock(m_world.mutex());
      Sandbox* sandbox = m_world.sandbox(q->sandbox_id());
      if (!sandbox) {
        return not_found("Sandbox " + q->sandbox_id());
      }
      for (const auto& [name, value] : sandbox->tags) {
        auto* tag = r->add_tags();
        tag->set_tag_name(name);
        tag->set_tag_value(value);
      }
      return Status::OK;
    });
  }

  // The tags become exactly these (whether Modal merges or replaces is not in the protos or the
  // notes: replacing is the reading a caller cannot get wrong by sending them all). A finished
  // sandbox keeps its tags and takes new ones, as SandboxTagsGet answers for it.
  Status SandboxTagsSet(ServerContext* c, const api::SandboxTagsSetRequest* q,
                        google::protobuf::Empty* r) override {
    return m_world.call(c, "SandboxTagsSet", *q, r, false, [&] {
      std::lock_guard lock(m_world.mutex());
      Sandbox* sandbox = m_world.sandbox(q->sandbox_id());
      if (!sandbox) {
        return not_found("Sandbox " + q->sandbox_id());
      }
      sandbox->tags.clear();
      for (const auto& tag : q->tags()) {
        sandbox->tags.emplace_back(tag.tag_name(), tag.tag_value());
      }
      return Status::OK;
    });
  }

  // The legacy snapshot: after --snapshot-delay; past the request's own timeout it answers
  // without a result, as a server that gave up waiting would.
  Status SandboxSnapshotFs(ServerContext* c, const api::SandboxSnapshotFsRequest* q,
                           api::SandboxSnapshotFsResponse* r) override {
    return m_world.call(c, "SandboxSnapshotFs", *q, r, false, [&] {
      double delay = m_world.options().snapshot_delay;
      if (delay > 0 &&
          !wait_for(m_world, c, std::min<double>(delay, q->timeout()), [] { return false; }) &&
          delay > q->timeout()) {
        return Status::OK;
      }
      std::lock_guard lock(m_world.mutex());
      Sandbox* sandbox = m_world.sandbox(q->sandbox_id());
      if (!sandbox) {
        return not_found("Sandbox " + q->sandbox_id());
      }
      r->set_image_id(m_world.snapshot(*sandbox));
      r->mutable_result()->set_status(api::GenericResult::GENERIC_STATUS_SUCCESS);
      return Status::OK;
    });
  }

  // The entrypoint's output, one stream per descriptor: from after last_entry_id ("" or "0-0":
  // from the start), batches as output comes, until the request's timeout (its window; 55 s when
  // unset) ends the stream; once the sandbox has finished and all was sent, a batch with eof and
  // no entry id. Not verified against Modal: what it answers for a descriptor other than stdout
  // or stderr (here INVALID_ARGUMENT) and for a malformed entry id (here: from the start).
  Status SandboxGetLogs(ServerContext* c, const api::SandboxGetLogsRequest* q,
                        grpc::ServerWriter<api::TaskLogsBatch>* w) override {
    return m_world.call(c, "SandboxGetLogs", *q, nullptr, false, [&] {
      const int fd = q->file_descriptor();
      if (fd != api::FILE_DESCRIPTOR_STDOUT && fd != api::FILE_DESCRIPTOR_STDERR) {
        return Status(StatusCode::INVALID_ARGUMENT,
                      "file_descriptor must be FILE_DESCRIPTOR_STDOUT or _STDERR (fake)");
      }
      const int index = fd == api::FILE_DESCRIPTOR_STDOUT ? 0 : 1;
      std::pair<std::uint64_t, std::uint64_t> cursor = entry_id_of(q->last_entry_id());
      const auto until = std::chrono::steady_clock::now() +
                         std::chrono::milliseconds(
                             static_cast<long>((q->timeout() > 0 ? q->timeout() : 55) * 1000));
      while (!c->IsCancelled()) {
        bool finished = false;
        std::shared_ptr<Exec> entrypoint;
        std::string task_id;
        {
          std::lock_guard lock(m_world.mutex());
          Sandbox* sandbox = m_world.sandbox(q->sandbox_id());
          if (!sandbox) {
            return not_found("Sandbox " + q->sandbox_id());
          }
          finished = sandbox->result.has_value();
          entrypoint = sandbox->entrypoint;
          task_id = sandbox->task_id;
        }
        api::TaskLogsBatch batch;
        bool ended = finished;
        if (entrypoint) {
          std::unique_lock lock(entrypoint->mutex);
          for (const auto& entry : entrypoint->logs[index]) {
            if (std::pair(entry.ms, entry.seq) <= cursor) {
              continue;
            }
            if (batch.items_size() == 100) {
              break; // the rest in the next batch
            }
            auto* item = batch.add_items();
            item->set_data(entry.data);
            item->set_file_descriptor(static_cast<api::FileDescriptor>(fd));
            item->set_timestamp(static_cast<double>(entry.ns) / 1e9);
            item->set_timestamp_ns(entry.ns);
            if (entry.data.empty()) {
              item->set_task_state(api::TASK_STATE_ACTIVE);
            }
            cursor = {entry.ms, entry.seq};
          }
          ended = finished && (index == 0 ? entrypoint->out_done : entrypoint->err_done);
          if (batch.items_size() == 0 && !ended && std::chrono::steady_clock::now() < until) {
            entrypoint->changed.wait_for(lock, std::chrono::milliseconds(100));
            continue;
          }
        }
        if (batch.items_size() > 0) {
          batch.set_task_id(task_id);
          batch.set_entry_id(std::to_string(cursor.first) + "-" + std::to_string(cursor.second));
          w->Write(batch);
          continue;
        }
        if (ended) {
          api::TaskLogsBatch eof;
          eof.set_task_id(task_id);
          eof.set_eof(true);
          w->Write(eof);
          return Status::OK;
        }
        if (std::chrono::steady_clock::now() >= until) {
          return Status::OK; // the window is over; the client asks again from its cursor
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100)); // no task yet
      }
      return Status(StatusCode::CANCELLED, "cancelled");
    });
  }

  Status TaskGetCommandRouterAccess(ServerContext* c,
                                    const api::TaskGetCommandRouterAccessRequest* q,
                                    api::TaskGetCommandRouterAccessResponse* r) override {
    return m_world.call(c, "TaskGetCommandRouterAccess", *q, r, false, [&] {
      std::lock_guard lock(m_world.mutex());
      if (!m_world.options().router) {
        return Status(StatusCode::UNIMPLEMENTED, "router disabled (fake)");
      }
      Sandbox* sandbox = m_world.sandbox_of_task(q->task_id());
      if (!sandbox) {
        return not_found("Task " + q->task_id());
      }
      r->set_jwt(m_world.issue_jwt(q->task_id()));
      r->set_url(m_world.options().router_url);
      return Status::OK;
    });
  }

  Status ContainerExec(ServerContext* c, const api::ContainerExecRequest* q,
                       api::ContainerExecResponse* r) override {
    return m_world.call(c, "ContainerExec", *q, r, false, [&] {
      std::lock_guard lock(m_world.mutex());
      Status refusal;
      Sandbox* sandbox = running_sandbox_of_task(m_world, q->task_id(), refusal);
      if (!sandbox) {
        return refusal;
      }
      ExecSetup setup;
      setup.argv.assign(q->command().begin(), q->command().end());
      setup.workdir = q->has_workdir() ? std::optional(q->workdir()) : std::nullopt;
      setup.stderr_to_stdout = q->stderr_output() == api::EXEC_OUTPUT_OPTION_STDOUT;
      setup.timeout_secs = q->timeout_secs() ? std::optional(q->timeout_secs()) : std::nullopt;
      setup.terminal = terminal_of(q->pty_info());
      std::string id = m_world.new_id("ce-");
      m_world.start_exec(*sandbox, id, setup);
      r->set_exec_id(id);
      return Status::OK;
    });
  }

  // batch_index is the byte offset reached in that stream; the batch that reaches the end of a
  // finished command carries its exit code.
  Status ContainerExecGetOutput(ServerContext* c, const api::ContainerExecGetOutputRequest* q,
                                grpc::ServerWriter<api::RuntimeOutputBatch>* w) override {
    return m_world.call(c, "ContainerExecGetOutput", *q, nullptr, false, [&] {
      std::shared_ptr<Exec> exec;
      {
        std::lock_guard lock(m_world.mutex());
        exec = m_world.exec(q->exec_id());
      }
      if (!exec) {
        return not_found("Exec " + q->exec_id());
      }
      const bool is_err = q->file_descriptor() == api::FILE_DESCRIPTOR_STDERR;
      std::uint64_t offset = q->last_batch_index();
      auto until = std::chrono::steady_clock::now() +
                   std::chrono::milliseconds(
                       static_cast<long>((q->timeout() > 0 ? q->timeout() : 55) * 1000));
      std::unique_lock lock(exec->mutex);
      while (!c->IsCancelled() && std::chrono::steady_clock::now() < until) {
        const std::string& buffer = is_err ? exec->err : exec->out;
        const bool done = exec->exited && (is_err ? exec->err_done : exec->out_done);
        if (buffer.size() > offset || done) {
          api::RuntimeOutputBatch batch;
          if (buffer.size() > offset) {
            auto* item = batch.add_items();
            item->set_file_descriptor(q->file_descriptor());
            item->set_message_bytes(buffer.substr(offset));
            offset = buffer.size();
          }
          batch.set_batch_index(offset);
          if (done) {
            batch.set_exit_code(exec->signal ? 128 + exec->signal : exec->code);
          }
          lock.unlock();
          w->Write(batch);
          if (done) {
            return Status::OK;
          }
          lock.lock();
          continue;
        }
        exec->changed.wait_for(lock, std::chrono::milliseconds(100));
      }
      return Status::OK;
    });
  }

  Status ContainerExecWait(ServerContext* c, const api::ContainerExecWaitRequest* q,
                           api::ContainerExecWaitResponse* r) override {
    return m_world.call(c, "ContainerExecWait", *q, r, false, [&] {
      std::shared_ptr<Exec> exec;
      {
        std::lock_guard lock(m_world.mutex());
        exec = m_world.exec(q->exec_id());
      }
      if (!exec) {
        return not_found("Exec " + q->exec_id());
      }
      std::unique_lock lock(exec->mutex);
      exec->changed.wait_for(lock,
                             std::chrono::milliseconds(static_cast<long>(q->timeout() * 1000)),
                             [&] { return exec->exited; });
      if (exec->exited) {
        r->set_completed(true);
        r->set_exit_code(exec->signal ? 128 + exec->signal : exec->code);
      }
      return Status::OK;
    });
  }

private:
  static void set_result(api::GenericResult& result, const Sandbox& sandbox) {
    result.set_status(*sandbox.result);
    if (sandbox.exitcode != 0) {
      result.set_exitcode(sandbox.exitcode);
    }
  }

  // "<ms>-<seq>" as ordered numbers; anything else (or nothing) is the start.
  static std::pair<std::uint64_t, std::uint64_t> entry_id_of(const std::string& text) {
    std::uint64_t ms = 0, seq = 0;
    char dash = 0;
    std::istringstream in(text);
    if (in >> ms >> dash >> seq && dash == '-' && in.peek() == EOF) {
      return {ms, seq};
    }
    return {0, 0};
  }

  // An image is there while its directory under --state-dir is: a test removes the directory to
  // play an image that expired (a snapshot's ttl_seconds) or was deleted.
  bool image_exists(const std::string& image_id) {
    auto found = m_world.images().find(image_id);
    std::error_code ignored;
    return found != m_world.images().end() && fs::is_directory(found->second.dir, ignored);
  }

  bool app_known(const std::string& app_id) {
    for (const auto& [key, id] : m_world.apps()) {
      if (id == app_id) {
        return true;
      }
    }
    return false;
  }

  World& m_world;
  double m_last_created = 0;
};

} // namespace

std::unique_ptr<api::ModalClient::Service> control_plane(World& world) {
  return std::make_unique<ControlPlane>(world);
}

} // namespace fake_modal
