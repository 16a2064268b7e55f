#include "world.hpp"

#include <csignal>
#include <fcntl.h>
#include <fstream>
#include <google/protobuf/util/json_util.h>
#include <nlohmann/json.hpp>
#include <pty.h>
#include <random>
#include <spawn.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char** environ;

namespace fake_modal {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json to_json(const google::protobuf::Message& message) {
  std::string text;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = false; // lowerCamelCase, as Modal's JSON tools show
  (void)google::protobuf::util::MessageToJsonString(message, &text, options);
  return json::parse(text, nullptr, false);
}

constexpr const char* k_replacement = "\xEF\xBF\xBD"; // U+FFFD

// Whether bytes[i] starts a whole, valid UTF-8 sequence of `len` bytes (no overlong form, no
// surrogate, nothing past U+10FFFF: what protobuf accepts in a string field).
bool valid_sequence(const std::string& bytes, size_t i, size_t len) {
  const auto c = static_cast<unsigned char>(bytes[i]);
  for (size_t j = 1; j < len; ++j) {
    if ((static_cast<unsigned char>(bytes[i + j]) & 0xC0) != 0x80) {
      return false;
    }
  }
  const auto d = len > 1 ? static_cast<unsigned char>(bytes[i + 1]) : 0;
  return !(len == 2 && c < 0xC2) && !(len == 3 && c == 0xE0 && d < 0xA0) &&
         !(len == 3 && c == 0xED && d >= 0xA0) && !(len == 4 && c == 0xF0 && d < 0x90) &&
         !(len == 4 && (c > 0xF4 || (c == 0xF4 && d >= 0x90)));
}

// How many bytes the UTF-8 sequence that `lead` starts has; 0 for a byte no sequence starts with.
size_t sequence_length(unsigned char lead) {
  if (lead < 0x80) {
    return 1;
  }
  if ((lead >> 5) == 6) {
    return 2;
  }
  if ((lead >> 4) == 14) {
    return 3;
  }
  return (lead >> 3) == 30 ? 4 : 0;
}

// The whole UTF-8 sequences at the start of `bytes`, each invalid byte replaced by U+FFFD; a
// sequence cut at the end stays in `bytes` for the next read (unless `last`).
std::string take_utf8(std::string& bytes, bool last) {
  std::string out;
  size_t i = 0;
  while (i < bytes.size()) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    const size_t len = sequence_length(c);
    if (len > 0 && i + len > bytes.size() && !last) {
      std::string cut = bytes.substr(i);
      cut.resize(len, '\x80'); // as if the rest came: is what is there the start of a sequence?
      if (valid_sequence(cut, 0, len)) {
        break;
      }
    }
    if (len == 0 || i + len > bytes.size() || !valid_sequence(bytes, i, len)) {
      out += k_replacement;
      ++i;
      continue;
    }
    out.append(bytes, i, len);
    i += len;
  }
  bytes.erase(0, i);
  return out;
}

// Appends an entry to the log of stdout (0) or stderr (1), under exec.mutex.
void append_log(Exec& exec, int index, std::string data) {
  const auto ns =
      static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count());
  LogEntry entry;
  entry.ns = ns;
  entry.ms = ns / 1000000;
  entry.data = std::move(data);
  auto& log = exec.logs[index];
  if (!log.empty() && entry.ms <= log.back().ms) {
    entry.ms = log.back().ms;
    entry.seq = log.back().seq + 1;
  }
  log.push_back(std::move(entry));
}

void read_into(std::shared_ptr<Exec> exec, int fd, bool is_err) {
  char buffer[4096];
  const int index = is_err ? 1 : 0;
  while (true) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    std::lock_guard lock(exec->mutex);
    if (n <= 0) {
      if (exec->logged && !exec->utf8_tail[index].empty()) {
        append_log(*exec, index, take_utf8(exec->utf8_tail[index], true));
      }
      (is_err ? exec->err_done : exec->out_done) = true;
      exec->changed.notify_all();
      break;
    }
    (is_err ? exec->err : exec->out).append(buffer, static_cast<size_t>(n));
    if (exec->logged) {
      exec->utf8_tail[index].append(buffer, static_cast<size_t>(n));
      std::string text = take_utf8(exec->utf8_tail[index], false);
      if (!text.empty()) {
        append_log(*exec, index, std::move(text));
      }
    }
    exec->changed.notify_all();
  }
  ::close(fd);
}

// Kills a command; with the entrypoint, everything it started (its process group, which may
// outlive it).
void kill_exec(Exec& exec) {
  if (exec.pid <= 0) {
    return;
  }
  if (exec.logged) {
    ::kill(-exec.pid, SIGKILL);
  }
  if (!exec.exited) {
    ::kill(exec.pid, SIGKILL);
  }
}

} // namespace

World::World(Options options) : m_options(std::move(options)) {
  fs::create_directories(m_options.state_dir / "images");
  fs::create_directories(m_options.state_dir / "sandboxes");
}

World::~World() {
  std::lock_guard lock(m_mutex);
  for (auto& [id, exec] : m_execs) {
    std::lock_guard exec_lock(exec->mutex);
    kill_exec(*exec);
  }
  for (auto& [id, sandbox] : m_sandboxes) {
    if (sandbox.entrypoint) {
      std::lock_guard exec_lock(sandbox.entrypoint->mutex);
      kill_exec(*sandbox.entrypoint);
    }
  }
}

double World::now_unix() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string World::new_id(const char* prefix) {
  static const char k_base62[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  static thread_local std::mt19937_64 engine{std::random_device{}()};
  std::string id = prefix;
  for (int i = 0; i < 22; ++i) {
    id += k_base62[engine() % 62];
  }
  return id;
}

std::string World::issue_jwt(const std::string& task_id) {
  std::string jwt = new_id("jwt-");
  m_jwts[jwt] = task_id;
  return jwt;
}

grpc::Status World::call(grpc::ServerContext* context, const char* rpc,
                         const google::protobuf::Message& request,
                         const google::protobuf::Message* response, bool router,
                         const std::function<grpc::Status()>& body) {
  const auto started = std::chrono::steady_clock::now();
  json metadata = json::object();
  std::string token_id, token_secret, authorization;
  for (const auto& [key, value] : context->client_metadata()) {
    std::string k(key.data(), key.size()), v(value.data(), value.size());
    if (k == "x-modal-token-id") {
      token_id = v;
      v = "<redacted>";
    } else if (k == "x-modal-token-secret") {
      token_secret = v;
      v = "<redacted>";
    } else if (k == "authorization") {
      authorization = v;
      v = "<redacted>";
    }
    if (k.starts_with("x-") || k == "authorization") {
      metadata[k] = v;
    }
  }
  grpc::Status status;
  bool faulted = false;
  bool lose_answer = false;
  {
    std::unique_lock lock(m_mutex);
    auto fault = m_options.faults.find(rpc);
    if (fault != m_options.faults.end() && fault->second.remaining > 0) {
      Options::Fault f = fault->second;
      --fault->second.remaining;
      lock.unlock();
      if (f.lose) {
        lose_answer = true;
      } else if (f.hang > 0) {
        auto until = std::chrono::steady_clock::now() +
                     std::chrono::milliseconds(static_cast<long>(f.hang * 1000));
        while (std::chrono::steady_clock::now() < until && !context->IsCancelled()) {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
      } else if (f.retry_after >= 0) {
        modal::client::RPCRetryPolicy policy;
        policy.set_retry_after_secs(static_cast<float>(f.retry_after));
        modal::client::RPCStatus details;
        details.set_code(grpc::StatusCode::RESOURCE_EXHAUSTED);
        details.set_message("rate limited (fake)");
        details.add_details()->PackFrom(policy);
        status = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "rate limited (fake)",
                              details.SerializeAsString());
        faulted = true;
      } else {
        status = grpc::Status(f.code, "injected by the fake");
        faulted = true;
      }
    }
  }
  if (!faulted) {
    if (router) {
      std::lock_guard lock(m_mutex);
      const std::string prefix = "Bearer ";
      if (!authorization.starts_with(prefix) ||
          !m_jwts.count(authorization.substr(prefix.size()))) {
        status = grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "missing or unknown JWT");
        faulted = true;
      }
    } else if (token_id != m_options.token_id || token_secret != m_options.token_secret) {
      status = grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "Invalid token id or secret");
      faulted = true;
    }
  }
  if (!faulted) {
    status = body();
    if (lose_answer && status.ok()) {
      status = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                            "connection reset (the fake lost the answer)");
    }
  }
  json line = {
      {"rpc", rpc},
      {"metadata", metadata},
      {"code", static_cast<int>(status.error_code())},
      {"request", to_json(request)},
      {"time", now_unix()},
      {"ms", std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started)
                 .count()}};
  if (response && status.ok()) {
    line["response"] = to_json(*response);
  }
  std::lock_guard lock(m_log_mutex);
  std::ofstream(m_options.state_dir / "calls.jsonl", std::ios::app) << line.dump() << "\n";
  return status;
}

void World::refresh(Sandbox& sandbox) {
  if (sandbox.result) {
    return;
  }
  if (sandbox.entrypoint) {
    // A sandbox ends with its entrypoint, as a container with its main process.
    std::unique_lock lock(sandbox.entrypoint->mutex);
    if (sandbox.entrypoint->exited) {
      const Exec& entry = *sandbox.entrypoint;
      sandbox.exitcode = entry.signal ? 128 + entry.signal : entry.code;
      lock.unlock();
      finish(sandbox, sandbox.exitcode == 0 ? modal::client::GenericResult::GENERIC_STATUS_SUCCESS
                                            : modal::client::GenericResult::GENERIC_STATUS_FAILURE);
      return;
    }
  }
  const auto now = std::chrono::steady_clock::now();
  unsigned timeout = sandbox.definition.timeout_secs() ? sandbox.definition.timeout_secs() : 300;
  if (now - sandbox.created > std::chrono::seconds(timeout)) {
    finish(sandbox, modal::client::GenericResult::GENERIC_STATUS_TIMEOUT);
    return;
  }
  bool running = false;
  for (auto& exec : sandbox.execs) {
    std::lock_guard lock(exec->mutex);
    running = running || !exec->exited;
  }
  if (running) {
    sandbox.last_activity = now;
  } else if (sandbox.definition.has_idle_timeout_secs() &&
             now - sandbox.last_activity >
                 std::chrono::seconds(sandbox.definition.idle_timeout_secs())) {
    finish(sandbox, modal::client::GenericResult::GENERIC_STATUS_IDLE_TIMEOUT);
  }
}

Sandbox* World::sandbox(const std::string& id) {
  auto found = m_sandboxes.find(id);
  if (found == m_sandboxes.end()) {
    return nullptr;
  }
  refresh(found->second);
  return &found->second;
}

Sandbox* World::sandbox_of_task(const std::string& task_id) {
  for (auto& [id, sandbox] : m_sandboxes) {
    if (!task_id.empty() && sandbox.task_id == task_id) {
      refresh(sandbox);
      return &sandbox;
    }
  }
  return nullptr;
}

void World::finish(Sandbox& sandbox, GenericStatus status) {
  if (sandbox.result) {
    return;
  }
  sandbox.result = status;
  for (auto& exec : sandbox.execs) {
    std::lock_guard lock(exec->mutex);
    kill_exec(*exec);
  }
  if (sandbox.entrypoint) {
    std::lock_guard lock(sandbox.entrypoint->mutex);
    kill_exec(*sandbox.entrypoint);
    sandbox.entrypoint->changed.notify_all(); // a log stream waiting on it sees the end
  }
}

int World::live_sandboxes() {
  int live = 0;
  for (auto& [id, sandbox] : m_sandboxes) {
    refresh(sandbox);
    live += sandbox.result ? 0 : 1;
  }
  return live;
}

Image& World::image_for_ref(const std::string& ref) {
  for (auto& [id, image] : m_images) {
    if (image.ref == ref) {
      return image;
    }
  }
  Image image;
  image.id = new_id("im-");
  image.ref = ref;
  image.broken = ref.starts_with("broken/");
  image.dir = m_options.state_dir / "images" / image.id;
  fs::create_directories(image.dir);
  return m_images[image.id] = image;
}

std::string World::snapshot(const Sandbox& sandbox) {
  Image image;
  image.id = new_id("im-");
  image.ref = "snapshot of " + sandbox.id;
  image.built = true;
  image.dir = m_options.state_dir / "images" / image.id;
  fs::copy(sandbox.dir, image.dir, fs::copy_options::recursive);
  m_images[image.id] = image;
  return image.id;
}

std::shared_ptr<Exec> World::exec(const std::string& exec_id) {
  auto found = m_execs.find(exec_id);
  return found == m_execs.end() ? nullptr : found->second;
}

std::shared_ptr<Exec> World::start_exec(Sandbox& sandbox, const std::string& exec_id,
                                        const ExecSetup& setup) {
  ExecSetup with_console = setup;
  if (sandbox.entrypoint && sandbox.entrypoint->pid > 0 &&
      !with_console.env.count("SANDBOXER_CONSOLE")) {
    with_console.env["SANDBOXER_CONSOLE"] =
        "/proc/" + std::to_string(sandbox.entrypoint->pid) + "/fd/1";
  }
  auto exec = spawn(sandbox, with_console);
  exec->id = exec_id;
  m_execs[exec_id] = exec;
  sandbox.execs.push_back(exec);
  sandbox.last_activity = std::chrono::steady_clock::now();
  return exec;
}

void World::start_entrypoint(Sandbox& sandbox) {
  const auto& args = sandbox.definition.entrypoint_args();
  if (args.empty() || sandbox.entrypoint) {
    return; // Modal would run the image's own command; the fake's images have none
  }
  ExecSetup setup;
  setup.argv.assign(args.begin(), args.end());
  if (sandbox.definition.has_workdir()) {
    setup.workdir = sandbox.definition.workdir();
  }
  setup.entrypoint = true;
  sandbox.entrypoint = spawn(sandbox, setup);
  sandbox.entrypoint->id = "entrypoint of " + sandbox.id;
}

std::shared_ptr<Exec> World::spawn(Sandbox& sandbox, const ExecSetup& setup) {
  auto exec = std::make_shared<Exec>();
  exec->sandbox_id = sandbox.id;
  if (setup.entrypoint) {
    exec->logged = true;
    append_log(*exec, 0, ""); // the task started: an entry without data on both streams
    append_log(*exec, 1, "");
  }
  fs::path cwd = sandbox.dir;
  if (setup.workdir) {
    cwd = sandbox.dir / fs::path(*setup.workdir).relative_path();
    fs::create_directories(cwd);
  }
  const std::vector<std::string>& argv = setup.argv;
  // Pipes, [0] reading and [1] writing; on a terminal the same slots hold its two sides (the
  // child's side in in[0], out[1], err[1], which the parent closes once the child has them).
  int in[2], out[2], err[2];
  bool opened = false;
  if (setup.terminal) {
    winsize size{};
    size.ws_row = setup.terminal->first;
    size.ws_col = setup.terminal->second;
    int parent = -1, child = -1;
    if (::openpty(&parent, &child, nullptr, nullptr, &size) == 0) {
      ::fcntl(parent, F_SETFD, FD_CLOEXEC);
      ::fcntl(child, F_SETFD, FD_CLOEXEC);
      in[0] = child, in[1] = parent;
      out[0] = ::fcntl(parent, F_DUPFD_CLOEXEC, 0), out[1] = ::fcntl(child, F_DUPFD_CLOEXEC, 0);
      err[0] = ::open("/dev/null", O_RDONLY | O_CLOEXEC),
      err[1] = ::fcntl(child, F_DUPFD_CLOEXEC, 0);
      opened = true;
    }
  } else {
    opened = !::pipe2(in, O_CLOEXEC) && !::pipe2(out, O_CLOEXEC) && !::pipe2(err, O_CLOEXEC);
  }
  if (!opened || argv.empty()) {
    exec->exited = exec->out_done = exec->err_done = true;
    exec->code = 126;
    return exec;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, setup.stderr_to_stdout ? out[1] : err[1], 2);
  posix_spawn_file_actions_addchdir_np(&actions, cwd.c_str());
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  if (setup.entrypoint) {
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attributes, 0);
  }
  std::vector<std::string> env_text;
  for (char** e = environ; *e; ++e) {
    std::string entry = *e;
    if (!setup.env.count(entry.substr(0, entry.find('=')))) {
      env_text.push_back(entry);
    }
  }
  for (const auto& [key, value] : setup.env) {
    env_text.push_back(key + "=" + value);
  }
  std::vector<char*> envp, args;
  for (auto& e : env_text) {
    envp.push_back(e.data());
  }
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& a : argv_copy) {
    args.push_back(a.data());
  }
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = ::posix_spawnp(&pid, args[0], &actions, &attributes, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  if (rc != 0) {
    // What real Modal reports here was not verified; this is what a shell would say.
    ::close(in[1]);
    ::close(out[0]);
    ::close(err[0]);
    exec->err =
        "exec: " + std::string(rc == ENOENT ? "no such file or directory" : "not executable") +
        ": " + argv[0] + "\n";
    exec->code = rc == ENOENT ? 127 : 126;
    exec->exited = exec->out_done = exec->err_done = true;
    if (exec->logged) {
      append_log(*exec, 1, exec->err);
    }
    return exec;
  }
  exec->pid = pid;
  exec->stdin_fd = in[1];
  std::thread(read_into, exec, out[0], false).detach();
  std::thread(read_into, exec, err[0], true).detach();
  std::thread([exec, timeout_secs = setup.timeout_secs] {
    int status = 0;
    if (timeout_secs && *timeout_secs > 0) {
      auto until = std::chrono::steady_clock::now() + std::chrono::seconds(*timeout_secs);
      while (::waitpid(exec->pid, &status, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() > until) {
          ::kill(exec->pid, SIGKILL);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    } else {
      while (::waitpid(exec->pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
    std::lock_guard lock(exec->mutex);
    exec->exited = true;
    if (WIFSIGNALED(status)) {
      exec->signal = WTERMSIG(status);
    } else {
      exec->code = WEXITSTATUS(status);
    }
    exec->changed.notify_all();
  }).detach();
  return exec;
}

} // namespace fake_modal
