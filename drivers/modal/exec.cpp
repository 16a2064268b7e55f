#include "drivers/modal/exec.hpp"

#include <array>
#include <cerrno>
#include <fmt/format.h>
#include <mutex>
#include <poll.h>
#include <thread>
#include <unistd.h>

#include <sandboxer/interrupt.hpp>

#include "drivers/modal/streams.hpp"

namespace sandboxer::drivers::modal {
namespace {

namespace api = ::modal::client;
namespace router = ::modal::task_command_router;
using Kind = DriverError::Kind;

// A stream of a running command may stay open as long as the sandbox lives; keepalive (30 s)
// notices a dead connection well before this.
constexpr auto k_stream_deadline = std::chrono::hours(24);
// Each wait for the command's end is a short call, so that an interrupt is noticed.
constexpr auto k_wait_slice = std::chrono::seconds(5);
constexpr int k_stream_failures = 8;

// Reads a whole stream with `call(context)`, resuming after a dropped connection; `received`
// keeps what was already delivered so a resumed stream starts where the last one stopped.
template <class Open>
void read_resuming(const Calls& calls, Readers& readers, const char* rpc, Open open_stream) {
  int failures = 0;
  while (!readers.stopped()) {
    grpc::ClientContext context;
    calls.prepare(context, k_stream_deadline);
    if (!readers.open(&context)) {
      return;
    }
    grpc::Status status = open_stream(context);
    readers.close(&context);
    if (status.ok() || readers.stopped()) {
      return;
    }
    if (!Calls::retryable(status.error_code()) || ++failures >= k_stream_failures) {
      throw calls.error(rpc, status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100 * failures));
  }
}

int status_of_wait(const router::TaskExecWaitResponse& done) {
  if (done.has_signal()) {
    return 128 + done.signal();
  }
  return done.code();
}

// Sends the local stdin to the command as it is read; ends with eof. Stops when told to.
void pump_stdin(const Calls& calls, router::TaskCommandRouter::Stub& stub,
                const std::string& task_id, const std::string& exec_id, int fd, Readers& readers) {
  std::uint64_t offset = 0;
  char buffer[65536];
  while (!readers.stopped()) {
    pollfd ready{fd, POLLIN, 0};
    int n = ::poll(&ready, 1, 200);
    if (n == 0 || (n < 0 && errno == EINTR)) {
      continue;
    }
    ssize_t got = n < 0 ? -1 : ::read(fd, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) {
      continue;
    }
    router::TaskExecStdinWriteRequest write;
    write.set_task_id(task_id);
    write.set_exec_id(exec_id);
    write.set_offset(offset);
    if (got > 0) {
      write.set_data(buffer, static_cast<size_t>(got));
    } else {
      write.set_eof(true);
    }
    router::TaskExecStdinWriteResponse written;
    calls.unary("TaskExecStdinWrite", calls.spec().call_timeout, [&](grpc::ClientContext& c) {
      return stub.TaskExecStdinWrite(&c, write, &written);
    });
    if (got <= 0) {
      return;
    }
    offset += static_cast<std::uint64_t>(got);
  }
}

} // namespace

int exec_through_router(const Calls& calls, const std::string& task_id, const ExecRequest& request,
                        const std::map<std::string, std::string>& env, ExecIo& io) {
  auto stub = router::TaskCommandRouter::NewStub(calls.channel());
  const std::string exec_id = random_uuid(); // the server's idempotency key for the start
  router::TaskExecStartRequest start;
  start.set_task_id(task_id);
  start.set_exec_id(exec_id);
  for (const auto& arg : request.argv) {
    start.add_command_args(arg);
  }
  start.set_stdout_config(router::TASK_EXEC_STDOUT_CONFIG_PIPE);
  start.set_stderr_config(router::TASK_EXEC_STDERR_CONFIG_PIPE);
  if (request.workdir) {
    start.set_workdir(*request.workdir);
  }
  for (const auto& [key, value] : env) {
    (*start.mutable_env())[key] = value;
  }
  if (request.tty) {
    auto& pty = *start.mutable_pty_info();
    pty.set_enabled(true);
    pty.set_pty_type(api::PTYInfo::PTY_TYPE_SHELL);
    if (auto size = io.terminal_size()) {
      pty.set_winsz_rows(size->rows);
      pty.set_winsz_cols(size->cols);
    }
    const char* term = std::getenv("TERM");
    pty.set_env_term(term ? term : "xterm");
  }
  router::TaskExecStartResponse started;
  calls.unary("TaskExecStart", calls.spec().call_timeout, [&](grpc::ClientContext& context) {
    return stub->TaskExecStart(&context, start, &started);
  });

  Readers readers;
  for (auto fd : {router::TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDOUT,
                  router::TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDERR}) {
    readers.start([&, fd](Readers& self) {
      std::uint64_t offset = 0;
      read_resuming(calls, self, "TaskExecStdioRead", [&](grpc::ClientContext& context) {
        router::TaskExecStdioReadRequest read;
        read.set_task_id(task_id);
        read.set_exec_id(exec_id);
        read.set_offset(offset);
        read.set_file_descriptor(fd);
        auto stream = stub->TaskExecStdioRead(&context, read);
        router::TaskExecStdioReadResponse chunk;
        while (stream->Read(&chunk)) {
          offset += chunk.data().size();
          std::lock_guard lock(self.io_mutex());
          if (fd == router::TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDOUT) {
            io.out(chunk.data());
          } else {
            io.err(chunk.data());
          }
        }
        return stream->Finish();
      });
    });
  }
  Readers input; // its own set: stdin ends when the command does, not with the output
  if (request.attach_stdin && io.stdin_fd() >= 0) {
    input.start(
        [&](Readers& self) { pump_stdin(calls, *stub, task_id, exec_id, io.stdin_fd(), self); });
  }

  router::TaskExecWaitRequest wait;
  wait.set_task_id(task_id);
  wait.set_exec_id(exec_id);
  router::TaskExecWaitResponse done;
  int failures = 0;
  while (true) {
    interrupt::check();
    grpc::ClientContext context;
    calls.prepare(context, k_wait_slice);
    grpc::Status status = stub->TaskExecWait(&context, wait, &done);
    if (status.ok()) {
      break;
    }
    if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      continue; // still running
    }
    if (!Calls::retryable(status.error_code()) || ++failures >= k_stream_failures) {
      throw calls.error("TaskExecWait", status);
    }
    interrupt::sleep_for(std::chrono::milliseconds(100 * failures));
  }
  input.stop();
  readers.join(); // the output streams end at the command's end, once all was sent
  return status_of_wait(done);
}

int exec_through_control_plane(const Calls& calls, api::ModalClient::Stub& stub,
                               const std::string& task_id, const ExecRequest& request, ExecIo& io) {
  api::ContainerExecRequest start;
  start.set_task_id(task_id);
  for (const auto& arg : request.argv) {
    start.add_command(arg);
  }
  start.set_stdout_output(api::EXEC_OUTPUT_OPTION_PIPE);
  start.set_stderr_output(api::EXEC_OUTPUT_OPTION_PIPE);
  if (request.workdir) {
    start.set_workdir(*request.workdir);
  }
  api::ContainerExecResponse started;
  calls.unary("ContainerExec", calls.spec().call_timeout, [&](grpc::ClientContext& context) {
    return stub.ContainerExec(&context, start, &started);
  });
  const std::string exec_id = started.exec_id();

  std::optional<int> exit_code;
  std::mutex exit_mutex;
  Readers readers;
  for (auto fd : {api::FILE_DESCRIPTOR_STDOUT, api::FILE_DESCRIPTOR_STDERR}) {
    readers.start([&, fd](Readers& self) {
      std::uint64_t last_batch = 0;
      bool finished = false;
      while (!finished && !self.stopped()) {
        read_resuming(calls, self, "ContainerExecGetOutput", [&](grpc::ClientContext& context) {
          api::ContainerExecGetOutputRequest read;
          read.set_exec_id(exec_id);
          read.set_timeout(55);
          read.set_last_batch_index(last_batch);
          read.set_file_descriptor(fd);
          read.set_get_raw_bytes(true);
          auto stream = stub.ContainerExecGetOutput(&context, read);
          api::RuntimeOutputBatch batch;
          while (stream->Read(&batch)) {
            last_batch = batch.batch_index();
            std::lock_guard lock(self.io_mutex());
            for (const auto& item : batch.items()) {
              const std::string& bytes =
                  item.message_bytes().empty() ? item.message() : item.message_bytes();
              if (fd == api::FILE_DESCRIPTOR_STDOUT) {
                io.out(bytes);
              } else {
                io.err(bytes);
              }
            }
            if (batch.has_exit_code()) {
              std::lock_guard exit_lock(exit_mutex);
              exit_code = batch.exit_code();
              finished = true;
            }
          }
          return stream->Finish();
        });
      }
    });
  }
  api::ContainerExecWaitRequest wait;
  wait.set_exec_id(exec_id);
  wait.set_timeout(static_cast<float>(k_wait_slice.count()));
  api::ContainerExecWaitResponse done;
  while (true) {
    interrupt::check();
    calls.unary("ContainerExecWait", k_wait_slice + std::chrono::seconds(5),
                [&](grpc::ClientContext& context) {
                  return stub.ContainerExecWait(&context, wait, &done);
                });
    if (done.completed()) {
      break;
    }
  }
  readers.join();
  if (done.has_exit_code()) {
    return done.exit_code();
  }
  std::lock_guard lock(exit_mutex);
  if (!exit_code) {
    throw DriverError(Kind::error, fmt::format("Modal ContainerExec {}: the command ended "
                                               "without an exit code",
                                               exec_id));
  }
  return *exit_code;
}

} // namespace sandboxer::drivers::modal
