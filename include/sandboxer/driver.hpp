#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <sandboxer/clock.hpp>

namespace sandboxer {

using Labels = std::map<std::string, std::string>;

// What a driver can do. The core refuses an unsupported verb from here, before any backend call,
// with "not supported by driver X".
struct Capabilities {
  bool snapshot = false;         // snapshot + restore (a new sandbox from a snapshot)
  bool exec = false;             // run a command inside the sandbox
  bool native_ttl = false;       // the backend keeps its own deadline; extend() moves it
  bool list_by_label = false;    // list_remote() finds resources by ownership label
  bool restore_in_place = false; // create() honours CreateRequest::replaces
  bool exec_user = false;        // exec() honours ExecRequest::user (exec -u)
  bool logs = false;             // logs(): the sandbox's own output (`sandboxer logs`)
  // stat_path(), copy_in() and copy_out() natively (`sandboxer cp`, docs/cp.md). Without it the
  // core copies over exec with stdin (`tar` in the sandbox), when the driver has that.
  bool copy = false;
  bool copy_owner = false; // copy_in() honours CopyInRequest::owner
  // create() exposes CreateRequest::ports and says where in CreateResult::ports (docs/ports.md).
  bool ports = false;
  // Where a client reaches those ports (`sandboxer forward`, `ready: {port}`, docs/ports.md).
  enum class PortReach {
    this_machine,   // bound on this machine (docker, vm-packer): forward relays locally
    through_driver, // on the backend's host (compose-ssh): Driver::forward brings them here
    public_url,     // at a URL of the service's own (e2b, modal): forward prints it
  };
  PortReach port_reach = PortReach::this_machine;
  // pause() and resume() (`sandboxer pause`, docs/pause.md). Without it both are refused before
  // any backend call (exit 7).
  bool pause = false;
  // The backend has no pause of its own (modal): the driver keeps the files (a snapshot) and ends
  // the sandbox, and resume makes it again. Processes never survive; `status` says it is emulated.
  bool pause_emulated = false;
};

// A port of the sandbox its profile exposes (`ports:`, docs/ports.md), as asked.
struct PortSpec {
  int port = 0;                   // inside the sandbox, 1-65535
  std::string protocol = "tcp";   // tcp or udp
  std::optional<int> host_port;   // none: the backend picks one
  std::string bind = "127.0.0.1"; // the host address, where the driver chooses one
};

// Where an exposed port is reached, as the backend made it.
struct PortBinding {
  int port = 0;
  std::string protocol = "tcp";
  std::string host;             // an address or a host name
  std::optional<int> host_port; // none where the URL alone says it (a cloud's host per port)
  std::string url;              // tcp://127.0.0.1:49153, https://8080-ID.e2b.app, ...
  bool operator==(const PortBinding&) const = default;
};

// Thrown by DriverFactory::parse_spec: `pointer` is a JSON pointer inside the driver's section
// ("/memory"); the core turns it into "file:line:col: driver.docker.memory: ...".
class SpecError : public std::runtime_error {
public:
  SpecError(std::string pointer, const std::string& message)
      : std::runtime_error(message), m_pointer(std::move(pointer)) {}
  const std::string& pointer() const { return m_pointer; }

private:
  std::string m_pointer;
};

// Where a profile's driver section was written, for values that name local files.
struct SpecOrigin {
  // The directory of the profile file that wrote the value at `pointer` (a JSON pointer inside the
  // section, "/compose_file"); with `extends`, a parent's value resolves against the parent's
  // directory. A relative path in a profile is relative to this, never to the working directory.
  std::function<std::filesystem::path(const std::string& pointer)> directory_of;
};

// "did you mean 'x'?" helper shared by every "unknown ..." message: the closest candidate within
// an edit distance of 2 (or a third of the word), if any; ASCII case and a swap of two neighbours
// count as typos.
std::optional<std::string> closest_match(const std::string& word,
                                         const std::vector<std::string>& candidates);

// Checks that `section` holds only `allowed` keys; throws SpecError naming the first unknown key
// with a did-you-mean. Every driver's parse_spec starts with this.
void check_keys(const nlohmann::json& section, const std::vector<std::string>& allowed,
                const std::string& pointer_prefix = "");

// A sandbox as a driver sees it: its ids, its stored spec, and what create() returned.
struct SandboxHandle {
  std::string sandbox_id; // sbx-...
  std::string backend_id; // the backend's own id (container id, directory, ...)
  nlohmann::json spec;    // the driver's normalized spec, as stored in the ledger
  nlohmann::json info;    // CreateResult::info, as stored in the ledger
  // destroy: how long its processes get between the polite stop and the kill, when the caller
  // chose (`destroy --timeout`, 0 for `--force`); else the driver's own (docker.stop_timeout).
  std::optional<std::chrono::seconds> stop_grace;
};

struct CreateRequest {
  std::string sandbox_id;
  std::string name; // unique per ledger; the sandbox id when none was given
  Labels labels;    // ownership labels to put on the backend resource (sandboxer.id, ...)
  std::map<std::string, std::string> env;
  std::optional<TimePoint> expires_at;      // for drivers with native TTL
  std::optional<std::string> from_snapshot; // SnapshotResult::backend_ref, for restore
  // restore --in-place: the backend id of the sandbox's current resource. The driver swaps it for
  // the new one: after success it is gone; after a failure it is left as it was.
  std::optional<std::string> replaces;
  std::vector<PortSpec> ports; // only for a driver with Capabilities::ports
  // A warm pool's member, made ahead of demand (docs/pools.md): the driver may start it from a
  // checkpoint it keeps of an identical sandbox booted before (vm-packer), instead of booting it.
  bool pool_member = false;
};

struct CreateResult {
  std::string backend_id;
  nlohmann::json info = nlohmann::json::object(); // driver-private, public, no secrets
  std::vector<PortBinding> ports;                 // one per CreateRequest::ports, the real values
};

struct SnapshotRequest {
  std::string snapshot_id; // snp-..., the id the ledger gives it
  std::string name;        // unique per sandbox ("snap-1" when the user gave none)
  // `snapshot --disk-only`: the filesystem alone, where the driver could also save the running
  // state (vm-packer's memory checkpoints). Drivers that only ever save the disk ignore it.
  bool disk_only = false;
  // The sandbox is paused (Driver::pause): a driver that cannot snapshot it so throws
  // DriverError::Kind::unsupported, and the core resumes it first.
  bool paused = false;
};

struct SnapshotResult {
  std::string backend_ref; // image tag, snapshot directory, ...
  std::optional<std::uint64_t> size_bytes;
};

struct BackendStatus {
  enum class State { running, stopped, paused, missing, unknown };
  State state = State::unknown;
  std::string detail; // the backend's own words
};
const char* to_string(BackendStatus::State state);

// A backend resource found by list_remote().
struct RemoteResource {
  std::string backend_id;
  Labels labels;
  std::string state; // the backend's own word
};

struct ExecRequest {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  std::optional<std::string> workdir;
  bool attach_stdin = false;
  // A terminal in the backend for the command (docker exec -t), whether or not sandboxer is on
  // one: stdout and stderr then arrive as one stream, as a terminal's do.
  bool tty = false;
  // exec -u: the user (name or uid, uid:gid where the backend takes it) to run as; nullopt: the
  // sandbox's default. Only sent to a driver whose Capabilities::exec_user says it honours it.
  std::optional<std::string> user;
};

// A terminal's size in character cells.
struct TerminalSize {
  unsigned rows = 0;
  unsigned cols = 0;
};

// Where exec output goes. The driver never prints: it hands bytes to this sink.
class ExecIo {
public:
  virtual ~ExecIo() = default;
  virtual void out(std::string_view bytes) = 0;
  virtual void err(std::string_view bytes) = 0;
  // A readable fd for the command's stdin when ExecRequest::attach_stdin, else -1.
  virtual int stdin_fd() const { return -1; }
  // With ExecRequest::tty: the size of the local terminal now, for the command's terminal; nullopt
  // when it is not known.
  virtual std::optional<TerminalSize> terminal_size() const { return std::nullopt; }
  // With ExecRequest::tty: an fd that becomes readable each time the local terminal is resized
  // (read it empty, then ask terminal_size()), or -1.
  virtual int resize_fd() const { return -1; }
};

// A command the backend could not start: says so on `io.err` in the one wording every driver uses,
// and returns the shell's status for it: 127 when `missing` (no such program), else 126 (not
// executable). docs/exit-codes.md.
int unstartable_command(std::string_view program, bool missing, ExecIo& io);

// `sandboxer logs`: which of the sandbox's own output to hand over.
struct LogsRequest {
  bool follow = false;             // then keep streaming until the sandbox stops (or a signal)
  std::optional<TimePoint> since;  // only lines at or after this time
  std::optional<std::size_t> tail; // only the last N lines of what is there now
};

// One line of a sandbox's output. `stream` is "stdout", "stderr" or, where the backend does not
// tell them apart (a serial console), "console".
struct LogLine {
  std::optional<TimePoint> time; // when the backend stamped it; none when it does not stamp
  std::string stream = "stdout";
  std::string text; // without its line ending
};

// Where logs() puts each line, in order. The driver never prints.
class LogSink {
public:
  virtual ~LogSink() = default;
  virtual void line(const LogLine& line) = 0;
};

// `lines` with the request's `since` and `tail` applied, for drivers that read a whole log at once
// (a file). A line without a time is kept by `since`: nothing says it is older.
std::vector<LogLine> select_log_lines(std::vector<LogLine> lines, const LogsRequest& request);

// What is at a path inside a sandbox: `sandboxer cp` decides from it where a copy goes, as
// `docker cp` does (docs/cp.md).
struct PathInfo {
  enum class Kind { missing, file, directory, symlink, other };
  Kind kind = Kind::missing;
  uint64_t size = 0;
  uint32_t mode = 0;       // permission bits
  std::string link_target; // Kind::symlink
};
const char* to_string(PathInfo::Kind kind);

// The tar stream (include/sandboxer/tar.hpp) of a copy into a sandbox, made by the core as the
// driver reads it: memory stays bounded whatever the size.
class CopySource {
public:
  virtual ~CopySource() = default;
  // Up to `size` next bytes of the stream into `buffer`; 0 at its end. May throw Interrupted.
  virtual size_t read(char* buffer, size_t size) = 0;
};

// Where a driver hands the tar stream of a copy out of a sandbox, as it arrives. The core parses
// it as untrusted input (core/cp/extract).
class CopySink {
public:
  virtual ~CopySink() = default;
  virtual void write(std::string_view bytes) = 0;
};

struct CopyInRequest {
  // An existing directory in the sandbox, absolute: the stream unpacks into it, replacing files of
  // the same names.
  std::string directory;
  // "UID:GID" to own everything the copy makes (Capabilities::copy_owner); none: the sandbox's
  // default user, as a file made by exec would be.
  std::optional<std::string> owner;
};

struct CopyOutRequest {
  // An absolute path in the sandbox: the stream holds it under its base name (a directory with
  // everything under it). A missing path is DriverError::Kind::not_found.
  std::string path;
  bool follow = false; // --follow: what symbolic links point to, not the links
};

// `sandboxer forward`: one exposed port brought to 127.0.0.1:local_port of this machine.
struct PortForward {
  int local_port = 0;
  PortBinding binding; // as the record holds it
};

// What Driver::forward reports to, and asks, the core. The driver never prints.
class ForwardIo {
public:
  virtual ~ForwardIo() = default;
  // The forward of `port` accepts connections now (again, after a reconnect).
  virtual void listening(const PortForward& port) = 0;
  // Something the user should know, said on stderr ("the ssh connection to HOST dropped;
  // reconnecting in 2s").
  virtual void notice(std::string_view what) = 0;
  // Polled at least every second: false once the sandbox has ended (or should no longer be
  // reached); the driver then stops and returns.
  virtual bool keep_going() = 0;
};

// `sandboxer pause` (docs/pause.md). Both pause() and resume() are idempotent: a pause of a paused
// sandbox, a resume of a running one, and a repeat with the same pause_id (reap's repair of an
// interrupted one) succeed without changing anything.
struct PauseRequest {
  std::string pause_id; // pse-..., the ledger's id of this pause
  // The profile's pause.memory: true keeps running processes (refused with Kind::refused where
  // the backend cannot), false keeps the files only; nullopt: the cheapest pause that keeps the
  // processes where the driver can, else the files.
  std::optional<bool> memory;
  // memory false: how long the processes get between the polite stop and the kill.
  std::optional<std::chrono::seconds> stop_grace;
  // Until when the paused state must last (ttl.paused_max), for a backend that keeps it for a
  // limited time (a snapshot's own expiry); nullopt: as long as the backend keeps it.
  std::optional<TimePoint> keep_until;
};

struct PauseResult {
  bool memory_kept = false; // running processes go on after resume
  std::string how;          // freeze, stop, checkpoint, snapshot+terminate, ... (the driver's word)
  std::optional<std::uint64_t> held_bytes;        // what the paused state holds on disk, if known
  nlohmann::json info = nlohmann::json::object(); // merged into the record's info
};

struct ResumeRequest {
  std::string pause_id;                // PauseRequest::pause_id of the pause being undone
  std::optional<TimePoint> expires_at; // the running deadline (for drivers with native TTL)
  // For a driver that makes the sandbox anew (pause_emulated): what create() got.
  Labels labels;
  std::vector<PortSpec> ports;
  // The ports as they were before the pause: a driver takes the same host ports again when free.
  std::vector<PortBinding> bindings;
};

struct ResumeResult {
  std::optional<std::string> backend_id;          // a new resource (pause_emulated)
  nlohmann::json info = nlohmann::json::object(); // merged into the record's info
  std::optional<std::vector<PortBinding>> ports;  // where the ports are now, when they moved
};

// Progress of long operations (pulls, boots); shown on stderr when it is a terminal.
class Progress {
public:
  virtual ~Progress() = default;
  virtual void update(std::string_view what) = 0;
};

// What the core hands to DriverFactory::open. Secrets are resolved values, in memory only.
struct DriverContext {
  std::filesystem::path data_dir; // scratch space of this driver, created by the core
  const Clock* clock = nullptr;
  Progress* progress = nullptr; // never null
  std::map<std::string, std::string> secrets;
  // Where the sandbox lives, as DriverFactory::location() described it when it was made and the
  // ledger recorded it (its keys are in the record's info). For a new sandbox it is where this
  // environment points now. A driver that reaches more than one backend opens this one, never
  // today's environment's: a sandbox is destroyed on the engine that made it.
  nlohmann::json location = nlohmann::json::object();

  // For drivers whose sandboxes live under a directory: the recorded {"root": ...}, else `now`
  // (the root a new sandbox would get). A ledger read from another state dir (a fleet ledger,
  // `ledger export`/`import`) still finds its sandboxes where they are.
  std::filesystem::path root_or(const std::filesystem::path& now) const {
    auto root = location.find("root");
    return root != location.end() && root->is_string()
               ? std::filesystem::path(root->get<std::string>())
               : now;
  }
};

// The live half of a driver, bound to one spec. Every failure is a DriverError; a resource that is
// already gone is DriverError::Kind::not_found; what the backend's own limits forbid (a plan's
// maximum lifetime) is Kind::refused (exit 7). Drivers never read the ledger, print or exit.
class Driver {
public:
  virtual ~Driver() = default;
  virtual CreateResult create(const CreateRequest& request) = 0;
  virtual void destroy(const SandboxHandle& sandbox) = 0;
  virtual BackendStatus status(const SandboxHandle& sandbox) = 0;
  virtual SnapshotResult snapshot(const SandboxHandle& sandbox, const SnapshotRequest& request);
  virtual void delete_snapshot(const std::string& backend_ref);
  // Returns the command's exit status (128+N when killed by signal N).
  virtual int exec(const SandboxHandle& sandbox, const ExecRequest& request, ExecIo& io);
  // Moves the backend's own deadline (Capabilities::native_ttl).
  virtual void extend(const SandboxHandle& sandbox, TimePoint new_deadline);
  // Every resource whose labels include all of `selector`.
  virtual std::vector<RemoteResource> list_remote(const Labels& selector);
  // The sandbox's own output (Capabilities::logs): its main process, its services, its console.
  // Every backend call has a deadline; with `follow`, each wait is interruptible (a signal
  // throws Interrupted) and it returns when the sandbox stops.
  virtual void logs(const SandboxHandle& sandbox, const LogsRequest& request, LogSink& sink);
  // `sandboxer cp` (Capabilities::copy). Every backend call has a deadline; a signal throws
  // Interrupted; a stream cut short is a DriverError, never a silent end.
  virtual PathInfo stat_path(const SandboxHandle& sandbox, const std::string& path);
  virtual void copy_in(const SandboxHandle& sandbox, const CopyInRequest& request,
                       CopySource& source);
  virtual void copy_out(const SandboxHandle& sandbox, const CopyOutRequest& request,
                        CopySink& sink);
  // `sandboxer forward` for Capabilities::PortReach::through_driver: each binding reached at
  // 127.0.0.1:local_port until io.keep_going() is false or a signal (Interrupted); a dropped way
  // is made again, and io.notice says so. A local port that cannot be bound is
  // DriverError::Kind::conflict.
  virtual void forward(const SandboxHandle& sandbox, const std::vector<PortForward>& ports,
                       ForwardIo& io);
  // `ready: {port}`: whether a TCP connection to the exposed `binding` opens now, made from where
  // a user connects, within `timeout`. The default connects from this machine to host:host_port
  // (Capabilities::PortReach::this_machine).
  virtual bool port_answers(const SandboxHandle& sandbox, const PortBinding& binding,
                            std::chrono::milliseconds timeout);
  // `sandboxer pause`/`resume` (Capabilities::pause), see PauseRequest. A sandbox that is gone is
  // Kind::not_found; after a pause, status() says BackendStatus::State::paused.
  virtual PauseResult pause(const SandboxHandle& sandbox, const PauseRequest& request);
  virtual ResumeResult resume(const SandboxHandle& sandbox, const ResumeRequest& request);

protected:
  [[noreturn]] void unsupported(std::string_view driver, std::string_view verb) const;
};

// The stateless half of a driver: its name, documentation, capabilities and schema.
class DriverFactory {
public:
  virtual ~DriverFactory() = default;
  virtual std::string_view name() const = 0;
  virtual std::string_view doc() const = 0;
  virtual Capabilities capabilities() const = 0;
  // Validates the profile's `<driver>:` section and returns it normalized (defaults filled in),
  // which is what the ledger stores. Throws SpecError.
  virtual nlohmann::json parse_spec(const nlohmann::json& section) const = 0;
  // parse_spec for a section read from a profile file. A driver whose spec names local files
  // overrides it to resolve relative paths with `origin`, so that the stored spec holds absolute
  // ones (and parse_spec of it changes nothing). The default ignores the origin.
  virtual nlohmann::json parse_profile_section(const nlohmann::json& section,
                                               const SpecOrigin& origin) const {
    (void)origin;
    return parse_spec(section);
  }
  // The JSON Schema of the profile's `<driver>:` section (`sandboxer schema profile` includes
  // it), or null when the driver publishes none. parse_spec stays the authority.
  virtual nlohmann::json schema() const { return nullptr; }
  // Whether a sandbox of this spec is reachable only from the machine that made it (a local
  // socket, local processes): in a ledger shared by several machines only that one may destroy
  // it. Remote backends (the default) may be reaped from anywhere.
  virtual bool host_local(const nlohmann::json& spec) const {
    (void)spec;
    return false;
  }
  // Where a sandbox of `spec` made from this environment now would live, as the few keys of its
  // info that say so (docker: {"engine": "unix:///var/run/docker.sock"}); the default, an empty
  // object, means the spec alone decides. The core records it before the create and hands the
  // recorded one back in DriverContext::location ever after. Throws what open would.
  virtual nlohmann::json location(const nlohmann::json& spec, const DriverContext& context) const {
    (void)spec;
    (void)context;
    return nlohmann::json::object();
  }
  virtual std::unique_ptr<Driver> open(const nlohmann::json& spec,
                                       const DriverContext& context) const = 0;
};

} // namespace sandboxer
