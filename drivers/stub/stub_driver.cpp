#include "drivers/stub/stub_driver.hpp"

#include <csignal>
#include <fcntl.h>
#include <fmt/format.h>
#include <fstream>
#include <spdlog/spdlog.h>
#include <sstream>
#include <sys/file.h>
#include <thread>
#include <unistd.h>

#include <sandboxer/copy_feed.hpp>
#include <sandboxer/duration.hpp>
#include <sandboxer/error.hpp>
#include <sandboxer/interrupt.hpp>
#include <sandboxer/proc.hpp>
#include <sandboxer/spec_table.hpp>

namespace sandboxer::drivers::stub {
namespace fs = std::filesystem;
namespace {

// "ready" is a readiness wait after the sandbox exists (as docker's readiness command): its
// latency is where an interrupted create leaves something behind for the core to undo.
const std::vector<std::string> k_ops = {"create", "ready", "destroy", "status", "snapshot",
                                        "exec",   "copy",  "pause",   "resume"};

struct Spec {
  std::optional<std::string> root;
  std::map<std::string, std::chrono::milliseconds> latency;
  std::map<std::string, long> fail; // op -> the Nth call fails; 0 means every call
  // false: a snapshot of a paused sandbox is unsupported, as e2b's is (reap then resumes it for
  // the snapshot: docs/pause.md).
  bool snapshot_paused = true;
};

// A mapping of operation: value, each value read with `item`.
template <class T> spec::Codec<std::map<std::string, T>> per_op(spec::Codec<T> item) {
  nlohmann::json properties = nlohmann::json::object();
  for (const auto& op : k_ops) {
    properties[op] = item.schema;
  }
  return {[item](const nlohmann::json& value, const spec::ReadContext& at) {
            check_keys(value, k_ops, at.pointer);
            std::map<std::string, T> out;
            for (const auto& [op, op_value] : value.items()) {
              out[op] = item.read(op_value, at.at(op));
            }
            return out;
          },
          [item](const std::map<std::string, T>& map) {
            nlohmann::json out = nlohmann::json::object();
            for (const auto& [op, op_value] : map) {
              out[op] = item.write(op_value);
            }
            return out;
          },
          {{"type", "object"}, {"additionalProperties", false}, {"properties", properties}}};
}

const spec::Codec<std::chrono::milliseconds> k_latency = {
    [](const nlohmann::json& value, const spec::ReadContext& at) {
      auto ms = value.is_string() ? parse_duration_ms(value.get<std::string>()) : std::nullopt;
      if (!ms) {
        throw SpecError(at.pointer, "invalid latency (use 250ms, 2s, 1m)");
      }
      return *ms;
    },
    [](const std::chrono::milliseconds& ms) {
      return nlohmann::json(fmt::format("{}ms", ms.count()));
    },
    {{"$ref", "#/$defs/duration_ms"}}};

const spec::Codec<long> k_failing_call = {
    [](const nlohmann::json& value, const spec::ReadContext& at) {
      if (value.is_string() && value.get<std::string>() == "always") {
        return 0L;
      }
      if (value.is_number_integer() && value.get<long>() >= 1) {
        return value.get<long>();
      }
      throw SpecError(at.pointer, "expected a call number >= 1 or \"always\"");
    },
    [](const long& n) { return n == 0 ? nlohmann::json("always") : nlohmann::json(n); },
    {{"anyOf", {{{"const", "always"}}, {{"type", "integer"}, {"minimum", 1}}}}}};

const spec::Table<Spec>& spec_table() {
  static const spec::Table<Spec> table = [] {
    spec::Table<Spec> t;
    t.driver = "stub";
    spec::Codec<std::string> root = {[](const nlohmann::json& value, const spec::ReadContext& at) {
                                       if (!value.is_string() || value.get<std::string>().empty()) {
                                         throw SpecError(at.pointer, "expected a directory path");
                                       }
                                       return value.get<std::string>();
                                     },
                                     [](const std::string& path) { return nlohmann::json(path); },
                                     {{"type", "string"}, {"minLength", 1}}};
    t.fields = {
        spec::field("root", &Spec::root, root),
        spec::field("latency", &Spec::latency, per_op(k_latency), "", spec::Write::if_not_empty),
        spec::field("fail", &Spec::fail, per_op(k_failing_call), "", spec::Write::if_not_empty),
        spec::field("snapshot_paused", &Spec::snapshot_paused, spec::boolean()),
    };
    return t;
  }();
  return table;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The sandbox's console file, in its directory.
constexpr const char* k_console = "console.log";
// Present while the sandbox is paused: {pause_id, memory}.
constexpr const char* k_paused = "paused.json";
// A copy has this long: the stub copies on this machine, where a stall is a bug.
constexpr std::chrono::minutes k_copy_deadline{30};

// A console line: "TIME STREAM TEXT" when the stub wrote it, else whatever a command wrote.
LogLine console_line(std::string_view text) {
  LogLine line;
  line.stream = "console";
  size_t space = text.find(' ');
  if (space != std::string_view::npos) {
    if (auto time = parse_time(text.substr(0, space))) {
      std::string_view rest = text.substr(space + 1);
      for (std::string_view stream : {"stdout ", "stderr "}) {
        if (rest.starts_with(stream)) {
          line.time = *time;
          line.stream = std::string(stream.substr(0, 6));
          line.text = std::string(rest.substr(7));
          return line;
        }
      }
    }
  }
  line.text = std::string(text);
  return line;
}

[[noreturn]] void io_failure(const std::string& what, const fs::path& path,
                             const std::error_code& ec) {
  throw DriverError(DriverError::Kind::error,
                    fmt::format("stub: cannot {} {}: {}", what, path.string(), ec.message()));
}

class StubDriver : public Driver {
public:
  StubDriver(Spec spec, fs::path root) : m_spec(std::move(spec)), m_root(std::move(root)) {
    std::error_code ec;
    for (const char* dir : {"sandboxes", "snapshots", "calls"}) {
      fs::create_directories(m_root / dir, ec);
      if (ec) {
        io_failure("create", m_root / dir, ec);
      }
    }
  }

  CreateResult create(const CreateRequest& request) override {
    enter("create");
    // Said at every create, where a CI log shows it: a job that meant to isolate its tests must
    // not believe it did.
    spdlog::warn("stub: {} isolates nothing: its commands run on this machine, as this user, in "
                 "a directory; the stub is for trying sandboxer out and for tests (use a docker "
                 "profile, e.g. --profile ci, to isolate)",
                 request.sandbox_id);
    fs::path final_dir = sandbox_dir(request.sandbox_id);
    fs::path staging = m_root / "sandboxes" / (".staging-" + request.sandbox_id);
    std::error_code ec;
    fs::remove_all(staging, ec);
    fs::create_directories(staging / "fs", ec);
    if (ec) {
      io_failure("create", staging, ec);
    }
    if (request.from_snapshot) {
      fs::path source = m_root / "snapshots" / *request.from_snapshot;
      if (!fs::is_directory(source)) {
        throw DriverError(DriverError::Kind::not_found,
                          fmt::format("stub: snapshot {} does not exist", *request.from_snapshot));
      }
      fs::copy(source, staging / "fs", fs::copy_options::recursive, ec);
      if (ec) {
        io_failure("copy snapshot into", staging, ec);
      }
    }
    nlohmann::json meta = {
        {"name", request.name}, {"labels", request.labels}, {"env", request.env}};
    std::ofstream(staging / "meta.json") << meta.dump() << "\n";
    // The sandbox's console (`sandboxer logs`): its first line, stamped as a backend would.
    std::ofstream(staging / k_console)
        << format_time(
               std::chrono::time_point_cast<std::chrono::seconds>(std::chrono::system_clock::now()))
        << " stdout stub sandbox " << request.sandbox_id << " started\n";
    if (request.replaces) {
      replace(sandbox_dir(*request.replaces), staging, final_dir);
    } else {
      // A rename makes the sandbox appear whole or not at all, even if this process is killed.
      fs::rename(staging, final_dir, ec);
      if (ec) {
        io_failure("create", final_dir, ec);
      }
    }
    try {
      enter("ready");
    } catch (const DriverError&) {
      // A failed readiness wait removes what it made, as docker's does; an interrupted one is
      // undone by the core.
      fs::remove_all(final_dir, ec);
      throw;
    }
    return {request.sandbox_id, {{"path", (final_dir / "fs").string()}}};
  }

  void destroy(const SandboxHandle& sandbox) override {
    enter("destroy");
    fs::path dir = sandbox_dir(sandbox.backend_id);
    if (!fs::exists(dir)) {
      throw DriverError(DriverError::Kind::not_found,
                        fmt::format("stub: sandbox {} does not exist", sandbox.backend_id));
    }
    // A paused sandbox's stopped processes would outlive it, stopped for good.
    if (fs::exists(dir / k_paused)) {
      signal_processes(dir, SIGKILL);
    }
    std::error_code ec;
    fs::remove_all(dir, ec);
    if (ec) {
      io_failure("remove", dir, ec);
    }
  }

  // The stub's pause: its processes (those an exec started, found by the console path in their
  // environment) stopped with SIGSTOP when memory is kept, else killed; paused.json says so.
  PauseResult pause(const SandboxHandle& sandbox, const PauseRequest& request) override {
    enter("pause");
    const fs::path dir = existing_dir(sandbox);
    const bool memory = request.memory.value_or(true);
    auto already = nlohmann::json::parse(read_text(dir / k_paused), nullptr, false);
    if (!already.is_object()) {
      signal_processes(dir, memory ? SIGSTOP : SIGKILL);
      write_atomically(dir / k_paused,
                       nlohmann::json{{"pause_id", request.pause_id}, {"memory", memory}}.dump());
    }
    const bool kept = already.is_object() ? already.value("memory", memory) : memory;
    return {.memory_kept = kept, .how = kept ? "sigstop" : "sigkill", .held_bytes = std::nullopt};
  }

  ResumeResult resume(const SandboxHandle& sandbox, const ResumeRequest&) override {
    enter("resume");
    const fs::path dir = existing_dir(sandbox);
    if (fs::exists(dir / k_paused)) {
      signal_processes(dir, SIGCONT);
      std::error_code ec;
      fs::remove(dir / k_paused, ec);
      if (ec) {
        io_failure("remove", dir / k_paused, ec);
      }
    }
    return {};
  }

  BackendStatus status(const SandboxHandle& sandbox) override {
    enter("status");
    const fs::path dir = sandbox_dir(sandbox.backend_id);
    if (fs::is_directory(dir)) {
      if (fs::exists(dir / k_paused)) {
        return {BackendStatus::State::paused, "directory present, paused"};
      }
      return {BackendStatus::State::running, "directory present"};
    }
    return {BackendStatus::State::missing, "directory absent"};
  }

  SnapshotResult snapshot(const SandboxHandle& sandbox, const SnapshotRequest& request) override {
    const std::string& name = request.name;
    enter("snapshot");
    if (request.paused && !m_spec.snapshot_paused) {
      throw DriverError(
          DriverError::Kind::unsupported,
          fmt::format("stub: sandbox {} is paused; snapshot_paused: false", sandbox.backend_id));
    }
    fs::path source = sandbox_dir(sandbox.backend_id) / "fs";
    if (!fs::is_directory(source)) {
      throw DriverError(DriverError::Kind::not_found,
                        fmt::format("stub: sandbox {} does not exist", sandbox.backend_id));
    }
    std::string ref = sandbox.backend_id + "-" + name;
    fs::path target = m_root / "snapshots" / ref;
    std::error_code ec;
    fs::remove_all(target, ec);
    fs::copy(source, target, fs::copy_options::recursive, ec);
    if (ec) {
      io_failure("copy", target, ec);
    }
    std::uint64_t size = 0;
    for (const auto& entry : fs::recursive_directory_iterator(target)) {
      if (entry.is_regular_file()) {
        size += entry.file_size();
      }
    }
    return {ref, size};
  }

  void delete_snapshot(const std::string& backend_ref) override {
    std::error_code ec;
    fs::remove_all(m_root / "snapshots" / backend_ref, ec);
    if (ec) {
      io_failure("remove", m_root / "snapshots" / backend_ref, ec);
    }
  }

  int exec(const SandboxHandle& sandbox, const ExecRequest& request, ExecIo& io) override {
    enter("exec");
    fs::path dir = existing_dir(sandbox);
    if (fs::exists(dir / k_paused)) {
      throw DriverError(DriverError::Kind::error,
                        fmt::format("stub: sandbox {} is paused", sandbox.backend_id));
    }
    auto meta = nlohmann::json::parse(read_text(dir / "meta.json"), nullptr, false);
    proc::Command command;
    command.argv = request.argv;
    if (meta.is_object() && meta["env"].is_object()) {
      command.env_set = meta["env"].get<std::map<std::string, std::string>>();
    }
    for (const auto& [key, value] : request.env) {
      command.env_set[key] = value;
    }
    // What a command writes here is the sandbox's own output, as a container's main process's is:
    // the conformance kit's logs check prints through it.
    command.env_set["SANDBOXER_CONSOLE"] = (dir / k_console).string();
    command.cwd = dir / "fs";
    if (request.workdir) {
      // A fresh directory tree has no /tmp: made on demand, as `docker run -w` does.
      command.cwd = *command.cwd / fs::path(*request.workdir).relative_path();
      std::error_code ec;
      fs::create_directories(*command.cwd, ec);
    }
    command.stdin_fd = request.attach_stdin ? io.stdin_fd() : -1;
    // -t: a terminal of the stub's own, as docker allocates one in the container.
    command.terminal = request.tty;
    command.on_stdout = [&](std::string_view bytes) { io.out(bytes); };
    command.on_stderr = [&](std::string_view bytes) { io.err(bytes); };
    command.on_interrupt = proc::Command::OnInterrupt::forward;
    try {
      return proc::run(command).status();
    } catch (const Interrupted&) {
      throw;
    } catch (const Error& e) {
      // What a shell does: 127 for a program that does not exist, 126 for one that cannot run
      // (the contract every driver keeps; docs/exit-codes.md).
      const bool missing = std::string_view(e.what()).find("ermission denied") == std::string::npos;
      return unstartable_command(request.argv.front(), missing, io);
    }
  }

  // A sandbox's files are its directory's fs/: "/" there. The host's tar moves them (the stub
  // isolates nothing); a link is followed on this machine, as exec would.
  PathInfo stat_path(const SandboxHandle& sandbox, const std::string& path) override {
    std::error_code ec;
    const fs::path local = files_of(sandbox) / fs::path(path).relative_path();
    const auto status = fs::status(local, ec);
    PathInfo info;
    if (fs::is_directory(status)) {
      info.kind = PathInfo::Kind::directory;
    } else if (fs::is_regular_file(status)) {
      info.kind = PathInfo::Kind::file;
      info.size = fs::file_size(local, ec);
    } else if (fs::exists(status)) {
      info.kind = PathInfo::Kind::other;
    } else if (fs::is_symlink(fs::symlink_status(local, ec))) {
      info.kind = PathInfo::Kind::symlink;
      info.link_target = fs::read_symlink(local, ec).string();
    }
    info.mode = static_cast<uint32_t>(status.permissions()) & 07777;
    return info;
  }

  void copy_in(const SandboxHandle& sandbox, const CopyInRequest& request,
               CopySource& source) override {
    enter("copy");
    const fs::path directory = files_of(sandbox) / fs::path(request.directory).relative_path();
    proc::Command command;
    command.argv = {"tar", "-x", "-f", "-", "-C", directory.string()};
    command.argv.push_back(request.owner ? "--same-owner" : "--no-same-owner");
    command.timeout = k_copy_deadline;
    proc::Result result;
    with_source_as_fd(source, [&](int fd) {
      command.stdin_fd = fd;
      result = proc::run(command);
      return 0;
    });
    check_tar(result, "copying into " + request.directory, sandbox);
  }

  void copy_out(const SandboxHandle& sandbox, const CopyOutRequest& request,
                CopySink& sink) override {
    enter("copy");
    const fs::path local = files_of(sandbox) / fs::path(request.path).relative_path();
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(local, ec))) {
      throw DriverError(DriverError::Kind::not_found,
                        fmt::format("stub: no such file or directory in sandbox {}: {}",
                                    sandbox.sandbox_id, request.path));
    }
    proc::Command command;
    command.argv = {"tar", "-c", "-f", "-", "-C", local.parent_path().string()};
    if (request.follow) {
      command.argv.push_back("-h");
    }
    command.argv.push_back("./" + local.filename().string());
    command.timeout = k_copy_deadline;
    command.on_stdout = [&](std::string_view bytes) { sink.write(bytes); };
    check_tar(proc::run(command), "copying " + request.path, sandbox);
  }

  static void check_tar(const proc::Result& result, const std::string& what,
                        const SandboxHandle& sandbox) {
    if (result.status() == 0) {
      return;
    }
    std::string said = result.err.substr(0, 2048);
    while (!said.empty() && said.back() == '\n') {
      said.pop_back();
    }
    throw DriverError(DriverError::Kind::error,
                      fmt::format("stub: {} in sandbox {} failed{}: {}", what, sandbox.sandbox_id,
                                  result.timed_out ? " (deadline)" : "", said));
  }

  fs::path files_of(const SandboxHandle& sandbox) const {
    const fs::path dir = sandbox_dir(sandbox.backend_id);
    if (!fs::is_directory(dir)) {
      throw DriverError(DriverError::Kind::not_found,
                        fmt::format("stub: sandbox {} does not exist", sandbox.backend_id));
    }
    return dir / "fs";
  }

  void logs(const SandboxHandle& sandbox, const LogsRequest& request, LogSink& sink) override {
    fs::path dir = sandbox_dir(sandbox.backend_id);
    std::ifstream in(dir / k_console, std::ios::binary);
    if (!fs::is_directory(dir) || !in) {
      throw DriverError(DriverError::Kind::not_found,
                        fmt::format("stub: sandbox {} does not exist", sandbox.backend_id));
    }
    std::vector<LogLine> lines;
    std::string text;
    while (std::getline(in, text)) {
      if (in.eof()) {
        break; // an unfinished last line: read again once it is whole
      }
      lines.push_back(console_line(text));
    }
    for (const auto& line : select_log_lines(std::move(lines), request)) {
      sink.line(line);
    }
    if (!request.follow) {
      return;
    }
    // Follow: the file grows until the sandbox is destroyed (its directory goes).
    in.clear();
    in.seekg(-static_cast<std::streamoff>(text.size()), std::ios::cur);
    std::string partial;
    while (fs::is_directory(dir)) {
      interrupt::sleep_for(std::chrono::milliseconds(100));
      in.clear();
      while (std::getline(in, text)) {
        if (in.eof()) {
          partial = text;
          break;
        }
        sink.line(console_line(text));
      }
      if (!partial.empty()) {
        in.clear();
        in.seekg(-static_cast<std::streamoff>(partial.size()), std::ios::cur);
        partial.clear();
      }
    }
  }

  std::vector<RemoteResource> list_remote(const Labels& selector) override {
    std::vector<RemoteResource> found;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(m_root / "sandboxes", ec)) {
      if (entry.path().filename().string().starts_with(".")) {
        continue;
      }
      auto meta = nlohmann::json::parse(read_text(entry.path() / "meta.json"), nullptr, false);
      if (!meta.is_object() || !meta["labels"].is_object()) {
        continue;
      }
      auto labels = meta["labels"].get<Labels>();
      bool matches = std::all_of(selector.begin(), selector.end(), [&](const auto& kv) {
        auto it = labels.find(kv.first);
        return it != labels.end() && it->second == kv.second;
      });
      if (matches) {
        found.push_back({entry.path().filename().string(), labels,
                         fs::exists(entry.path() / k_paused) ? "paused" : "running"});
      }
    }
    return found;
  }

private:
  // restore --in-place: `staging` takes the place of `old`; on failure `old` stays as it was.
  void replace(const fs::path& old, const fs::path& staging, const fs::path& final_dir) {
    fs::path aside = old.parent_path() / (".replaced-" + old.filename().string());
    std::error_code ec;
    fs::remove_all(aside, ec);
    bool had_old = fs::exists(old);
    if (had_old) {
      fs::rename(old, aside, ec);
      if (ec) {
        fs::remove_all(staging);
        io_failure("move aside", old, ec);
      }
    }
    fs::rename(staging, final_dir, ec);
    if (ec) {
      std::error_code ignored;
      fs::remove_all(staging, ignored);
      if (had_old) {
        fs::rename(aside, old, ignored);
      }
      io_failure("create", final_dir, ec);
    }
    fs::remove_all(aside, ec);
  }

  fs::path existing_dir(const SandboxHandle& sandbox) const {
    fs::path dir = sandbox_dir(sandbox.backend_id);
    if (!fs::is_directory(dir)) {
      throw DriverError(DriverError::Kind::not_found,
                        fmt::format("stub: sandbox {} does not exist", sandbox.backend_id));
    }
    return dir;
  }

  // Sends `signal` to every process of this user whose environment names the sandbox's console
  // (exec sets it, and children inherit it).
  static void signal_processes(const fs::path& dir, int signal) {
    const std::string marker = "SANDBOXER_CONSOLE=" + (dir / k_console).string();
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator("/proc", ec)) {
      const std::string pid_text = entry.path().filename().string();
      if (pid_text.find_first_not_of("0123456789") != std::string::npos) {
        continue;
      }
      const std::string environ = read_text(entry.path() / "environ");
      for (size_t at = 0; at < environ.size();) {
        size_t end = environ.find('\0', at);
        end = end == std::string::npos ? environ.size() : end;
        if (std::string_view(environ).substr(at, end - at) == marker) {
          ::kill(std::stoi(pid_text), signal);
          break;
        }
        at = end + 1;
      }
    }
  }

  static void write_atomically(const fs::path& path, const std::string& text) {
    const fs::path staging = path.parent_path() / ("." + path.filename().string() + ".tmp");
    {
      std::ofstream out(staging, std::ios::binary | std::ios::trunc);
      out << text << "\n";
      if (!out.flush()) {
        io_failure("write", staging, std::error_code(errno, std::generic_category()));
      }
    }
    std::error_code ec;
    fs::rename(staging, path, ec);
    if (ec) {
      io_failure("write", path, ec);
    }
  }

  fs::path sandbox_dir(const std::string& backend_id) const {
    if (backend_id.empty() || backend_id.find('/') != std::string::npos || backend_id[0] == '.') {
      throw DriverError(DriverError::Kind::not_found,
                        fmt::format("stub: invalid backend id \"{}\"", backend_id));
    }
    return m_root / "sandboxes" / backend_id;
  }

  // Applies the injected latency and failure of `op`. The call counter lives in a file under the
  // root so that "the Nth create fails" holds across processes.
  void enter(const std::string& op) {
    if (auto it = m_spec.latency.find(op); it != m_spec.latency.end()) {
      interrupt::sleep_for(std::chrono::duration_cast<std::chrono::milliseconds>(it->second));
    }
    auto fail = m_spec.fail.find(op);
    if (fail == m_spec.fail.end()) {
      return;
    }
    long call = next_call_number(op);
    if (fail->second == 0 || call == fail->second) {
      throw DriverError(DriverError::Kind::error,
                        fmt::format("stub: injected failure of {} (call #{})", op, call));
    }
  }

  long next_call_number(const std::string& op) {
    fs::path path = m_root / "calls" / op;
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
      io_failure("open", path, std::error_code(errno, std::generic_category()));
    }
    flock(fd, LOCK_EX);
    char buffer[32] = {};
    ssize_t n = pread(fd, buffer, sizeof buffer - 1, 0);
    long call = (n > 0 ? std::atol(buffer) : 0) + 1;
    std::string text = std::to_string(call);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, text.data(), text.size(), 0) < 0) {
      close(fd);
      io_failure("write", path, std::error_code(errno, std::generic_category()));
    }
    close(fd);
    return call;
  }

  Spec m_spec;
  fs::path m_root;
};

class StubFactory : public spec::TableFactory<Spec> {
public:
  std::string_view name() const override { return "stub"; }
  std::string_view doc() const override {
    return "local directories with injectable latency and faults, for testing: it isolates "
           "nothing (commands run on this machine)";
  }
  // Under the state directory by default; a `root:` shared by several machines plays a remote
  // backend.
  bool host_local(const nlohmann::json& spec) const override { return !spec.contains("root"); }
  Capabilities capabilities() const override {
    return {.snapshot = true,
            .exec = true,
            .native_ttl = false,
            .list_by_label = true,
            .restore_in_place = true,
            .logs = true,
            .copy = true,
            .copy_owner = true,
            .pause = true};
  }
  nlohmann::json location(const nlohmann::json& spec, const DriverContext& context) const override {
    Spec bound = bind(spec);
    return {{"root", (bound.root ? fs::path(*bound.root) : context.data_dir).string()}};
  }
  std::unique_ptr<Driver> open(const nlohmann::json& spec,
                               const DriverContext& context) const override {
    Spec bound = bind(spec);
    fs::path root = context.root_or(bound.root ? fs::path(*bound.root) : context.data_dir);
    return std::make_unique<StubDriver>(std::move(bound), root);
  }

protected:
  const spec::Table<Spec>& spec_table() const override { return stub::spec_table(); }
};

} // namespace

const DriverFactory& stub_factory() {
  static const StubFactory factory;
  return factory;
}

} // namespace sandboxer::drivers::stub
