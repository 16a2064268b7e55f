// TaskCommandRouter: commands run for real in the sandbox's directory, output streamed from any
// offset as it comes, stdin written at an offset, waits bounded by the client's deadline, and
// filesystem snapshots (slow on request).

#include <thread>
#include <unistd.h>

#include "services.hpp"

namespace fake_modal {
namespace {

namespace router = modal::task_command_router;
using grpc::ServerContext;
using grpc::Status;
using grpc::StatusCode;

class CommandRouter : public router::TaskCommandRouter::Service {
public:
  explicit CommandRouter(World& world) : m_world(world) {}

  Status TaskExecStart(ServerContext* c, const router::TaskExecStartRequest* q,
                       router::TaskExecStartResponse* r) override {
    return m_world.call(c, "TaskExecStart", *q, r, true, [&] {
      std::lock_guard lock(m_world.mutex());
      Status refusal;
      Sandbox* sandbox = running_sandbox_of_task(m_world, q->task_id(), refusal);
      if (!sandbox) {
        return refusal;
      }
      if (m_world.exec(q->exec_id())) {
        return Status::OK; // exec_id is the idempotency key: already started
      }
      ExecSetup setup;
      setup.argv.assign(q->command_args().begin(), q->command_args().end());
      setup.env.insert(q->env().begin(), q->env().end());
      setup.workdir = q->has_workdir() ? std::optional(q->workdir()) : std::nullopt;
      setup.stderr_to_stdout = q->stderr_config() == router::TASK_EXEC_STDERR_CONFIG_STDOUT;
      setup.timeout_secs = q->has_timeout_secs() ? std::optional(q->timeout_secs()) : std::nullopt;
      setup.terminal = terminal_of(q->pty_info());
      m_world.start_exec(*sandbox, q->exec_id(), setup);
      return Status::OK;
    });
  }

  Status TaskExecStdioRead(ServerContext* c, const router::TaskExecStdioReadRequest* q,
                           grpc::ServerWriter<router::TaskExecStdioReadResponse>* w) override {
    return m_world.call(c, "TaskExecStdioRead", *q, nullptr, true, [&] {
      auto exec = find(q->exec_id());
      if (!exec) {
        return not_found("Exec " + q->exec_id());
      }
      const bool is_err = q->file_descriptor() == router::TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDERR;
      std::uint64_t offset = q->offset();
      std::unique_lock lock(exec->mutex);
      while (!c->IsCancelled()) {
        const std::string& buffer = is_err ? exec->err : exec->out;
        if (buffer.size() > offset) {
          router::TaskExecStdioReadResponse chunk;
          chunk.set_data(buffer.substr(offset));
          offset = buffer.size();
          lock.unlock();
          w->Write(chunk);
          lock.lock();
          continue;
        }
        if (exec->exited && (is_err ? exec->err_done : exec->out_done)) {
          return Status::OK;
        }
        exec->changed.wait_for(lock, std::chrono::milliseconds(100));
      }
      return Status(StatusCode::CANCELLED, "cancelled");
    });
  }

  Status TaskExecWait(ServerContext* c, const router::TaskExecWaitRequest* q,
                      router::TaskExecWaitResponse* r) override {
    return m_world.call(c, "TaskExecWait", *q, r, true, [&] {
      auto exec = find(q->exec_id());
      if (!exec) {
        return not_found("Exec " + q->exec_id());
      }
      std::unique_lock lock(exec->mutex);
      while (!exec->exited) {
        if (c->IsCancelled() || std::chrono::system_clock::now() > c->deadline()) {
          return Status(StatusCode::DEADLINE_EXCEEDED, "still running");
        }
        exec->changed.wait_for(lock, std::chrono::milliseconds(50));
      }
      if (exec->signal) {
        r->set_signal(exec->signal);
      } else {
        r->set_code(exec->code);
      }
      return Status::OK;
    });
  }

  Status TaskExecStdinWrite(ServerContext* c, const router::TaskExecStdinWriteRequest* q,
                            router::TaskExecStdinWriteResponse* r) override {
    return m_world.call(c, "TaskExecStdinWrite", *q, r, true, [&] {
      auto exec = find(q->exec_id());
      if (!exec) {
        return not_found("Exec " + q->exec_id());
      }
      std::lock_guard lock(exec->mutex);
      if (exec->stdin_fd < 0) {
        return Status::OK;
      }
      // Bytes before what was already written are a retry's: skipped.
      std::uint64_t skip =
          exec->stdin_written > q->offset() ? exec->stdin_written - q->offset() : 0;
      const std::string& data = q->data();
      for (size_t done = std::min<size_t>(skip, data.size()); done < data.size();) {
        ssize_t n = ::write(exec->stdin_fd, data.data() + done, data.size() - done);
        if (n < 0 && errno == EINTR) {
          continue;
        }
        if (n <= 0) {
          break; // the command closed its stdin
        }
        done += static_cast<size_t>(n);
        exec->stdin_written += static_cast<std::uint64_t>(n);
      }
      if (q->eof()) {
        ::close(exec->stdin_fd);
        exec->stdin_fd = -1;
      }
      return Status::OK;
    });
  }

  Status TaskSnapshotFilesystem(ServerContext* c, const router::TaskSnapshotFilesystemRequest* q,
                                router::TaskSnapshotFilesystemResponse* r) override {
    return m_world.call(c, "TaskSnapshotFilesystem", *q, r, true, [&] {
      if (!q->has_ttl_seconds() || q->ttl_seconds() == 0 || q->ttl_seconds() < -1) {
        return Status(StatusCode::INVALID_ARGUMENT, "ttl_seconds must be set: > 0, or -1");
      }
      {
        std::lock_guard lock(m_world.mutex());
        auto done = m_snapshots.find(q->snapshot_id());
        if (done != m_snapshots.end()) {
          r->set_image_id(done->second);
          return Status::OK;
        }
      }
      auto until =
          std::chrono::steady_clock::now() +
          std::chrono::milliseconds(static_cast<long>(m_world.options().snapshot_delay * 1000));
      while (std::chrono::steady_clock::now() < until) {
        if (c->IsCancelled()) {
          return Status(StatusCode::CANCELLED, "cancelled");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      std::lock_guard lock(m_world.mutex());
      Sandbox* sandbox = m_world.sandbox_of_task(q->task_id());
      if (!sandbox) {
        return not_found("Task " + q->task_id());
      }
      std::string image = m_world.snapshot(*sandbox);
      m_snapshots[q->snapshot_id()] = image;
      r->set_image_id(image);
      return Status::OK;
    });
  }

private:
  std::shared_ptr<Exec> find(const std::string& exec_id) {
    std::lock_guard lock(m_world.mutex());
    return m_world.exec(exec_id);
  }

  World& m_world;
  std::map<std::string, std::string> m_snapshots; // snapshot_id -> image id
};

} // namespace

std::unique_ptr<router::TaskCommandRouter::Service> command_router(World& world) {
  return std::make_unique<CommandRouter>(world);
}

} // namespace fake_modal
