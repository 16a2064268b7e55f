#pragma once

// The fake Modal's state: apps, images (directories), sandboxes (directories, a lifetime) and the
// commands run in them (real local processes), behind one mutex; plus the call log and the
// injected faults. Written from shared/specs/modal-notes.md, not from the driver.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <grpcpp/grpcpp.h>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "modal_proto/api.pb.h"

namespace fake_modal {

using GenericStatus = modal::client::GenericResult::GenericStatus;

// One entry of a sandbox's log stream (SandboxGetLogs): its id is "<ms>-<seq>", as in a Redis
// stream, ordered; data is valid UTF-8 (the field is a proto3 string). An entry without data marks
// the start of the task, as Modal sends.
struct LogEntry {
  std::uint64_t ms = 0, seq = 0, ns = 0;
  std::string data;
};

// One command run in a sandbox: its output as it comes, its stdin, its end.
struct Exec {
  std::string id;
  std::string sandbox_id;
  pid_t pid = -1;
  int stdin_fd = -1;
  std::uint64_t stdin_written = 0;
  std::string out, err;
  bool out_done = false, err_done = false, exited = false;
  int code = 0, signal = 0;
  // The entrypoint's output is also kept as log entries, stdout's in logs[0], stderr's in logs[1],
  // with what was read of a UTF-8 sequence not yet whole.
  bool logged = false;
  std::vector<LogEntry> logs[2];
  std::string utf8_tail[2];
  std::mutex mutex;
  std::condition_variable changed;
};

// What an exec request asks for (TaskExecStart or ContainerExec).
struct ExecSetup {
  std::vector<std::string> argv;
  std::optional<std::string> workdir;
  std::map<std::string, std::string> env;
  bool stderr_to_stdout = false;
  std::optional<unsigned> timeout_secs;
  // pty_info.enabled: the command runs on a terminal of this size (rows, columns); its output
  // is all stdout, as on a terminal.
  std::optional<std::pair<unsigned short, unsigned short>> terminal;
  // The entrypoint: its own process group (ending the sandbox kills all it started), its output
  // kept as logs.
  bool entrypoint = false;
};

struct Image {
  std::string id, ref;
  std::filesystem::path dir;
  bool built = false, broken = false;
  int joins = 0;
};

struct Sandbox {
  std::string id, app_id, image_id, task_id;
  modal::client::Sandbox definition;
  std::vector<std::pair<std::string, std::string>> tags;
  double created_at = 0;
  int task_polls = 0;
  std::optional<GenericStatus> result;
  int exitcode = 0; // the entrypoint's, when it ended by itself
  std::chrono::steady_clock::time_point created, last_activity;
  std::filesystem::path dir;
  std::vector<std::shared_ptr<Exec>> execs;
  // The definition's entrypoint_args, run from the moment the task exists; when it ends, the
  // sandbox has finished (SUCCESS for status 0, else FAILURE with its exit code).
  std::shared_ptr<Exec> entrypoint;
};

struct Options {
  std::filesystem::path state_dir;
  std::string token_id = "ak-fake", token_secret = "as-fake";
  int task_polls = 2, build_polls = 2, max_sandboxes = 1000;
  double snapshot_delay = 0;
  bool router = true;
  std::string router_url; // set once the port is known
  struct Fault {
    int remaining = 0;
    grpc::StatusCode code = grpc::StatusCode::OK;
    double retry_after = -1; // >= 0: RESOURCE_EXHAUSTED with an RPCRetryPolicy
    double hang = 0;
    bool lose = false; // the call is done, then its answer lost (UNAVAILABLE, as a reset)
  };
  std::map<std::string, Fault> faults;
};

class World {
public:
  explicit World(Options options);
  ~World();

  Options& options() { return m_options; }
  std::mutex& mutex() { return m_mutex; }

  // Every call goes through here: faults, then the token (or the router's JWT), then `body`;
  // one line in calls.jsonl with the metadata (tokens redacted), request, response and code.
  grpc::Status call(grpc::ServerContext* context, const char* rpc,
                    const google::protobuf::Message& request,
                    const google::protobuf::Message* response, bool router,
                    const std::function<grpc::Status()>& body);

  std::string new_id(const char* prefix);
  std::string issue_jwt(const std::string& task_id);

  // Under mutex(): lookups that also end a sandbox whose lifetime or idle time is over.
  Sandbox* sandbox(const std::string& id);
  Sandbox* sandbox_of_task(const std::string& task_id);
  std::map<std::string, Sandbox>& sandboxes() { return m_sandboxes; }
  std::map<std::string, Image>& images() { return m_images; }
  std::map<std::string, std::string>& apps() { return m_apps; }
  void finish(Sandbox& sandbox, GenericStatus status);
  int live_sandboxes();
  Image& image_for_ref(const std::string& ref);
  // A new, built image holding a copy of the sandbox's files.
  std::string snapshot(const Sandbox& sandbox);

  // Starts argv in the sandbox (under mutex()); nullptr-free: a program that cannot start is an
  // Exec that ended with 127 and a message on stderr, as a shell says it.
  // Each exec of a sandbox whose entrypoint runs gets SANDBOXER_CONSOLE, the entrypoint's stdout
  // (/proc/PID/fd/1): what a container's /proc/1/fd/1 is, which the fake cannot give.
  std::shared_ptr<Exec> start_exec(Sandbox& sandbox, const std::string& exec_id,
                                   const ExecSetup& setup);
  // Starts the definition's entrypoint_args (under mutex()), when it has any.
  void start_entrypoint(Sandbox& sandbox);
  std::shared_ptr<Exec> exec(const std::string& exec_id);

  static double now_unix();

private:
  void refresh(Sandbox& sandbox);
  std::shared_ptr<Exec> spawn(Sandbox& sandbox, const ExecSetup& setup);

  Options m_options;
  std::mutex m_mutex;
  std::mutex m_log_mutex;
  std::map<std::string, std::string> m_apps; // environment/name -> id
  std::map<std::string, Image> m_images;
  std::map<std::string, Sandbox> m_sandboxes;
  std::map<std::string, std::shared_ptr<Exec>> m_execs;
  std::map<std::string, std::string> m_jwts; // jwt -> task id
};

} // namespace fake_modal
