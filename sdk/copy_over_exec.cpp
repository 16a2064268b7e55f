#include <exception>
#include <filesystem>
#include <fmt/format.h>

#include <sandboxer/copy_feed.hpp>
#include <sandboxer/copy_over_exec.hpp>
#include <sandboxer/interrupt.hpp>

namespace sandboxer {
namespace {

constexpr size_t k_kept_stderr_bytes = 4096;

// The output of one exec: stdout to `on_out`, stderr kept (bounded) for the error message.
class TarIo : public ExecIo {
public:
  explicit TarIo(std::function<void(std::string_view)> on_out, int stdin_fd = -1)
      : m_on_out(std::move(on_out)), m_stdin_fd(stdin_fd) {}
  // The core's sinks keep their own failures until the exec ends (core/cp/transfer's
  // KeepingSink), so nothing is thrown through the driver's reading loop.
  void out(std::string_view bytes) override { m_on_out(bytes); }
  void err(std::string_view bytes) override {
    m_stderr.append(
        bytes.substr(0, k_kept_stderr_bytes - std::min(k_kept_stderr_bytes, m_stderr.size())));
  }
  int stdin_fd() const override { return m_stdin_fd; }
  void set_stdin(int fd) { m_stdin_fd = fd; }

  std::string stderr_line() const {
    std::string line = m_stderr;
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) {
      line.pop_back();
    }
    return line;
  }

private:
  std::function<void(std::string_view)> m_on_out;
  int m_stdin_fd;
  std::string m_stderr;
};

int run(Driver& driver, const SandboxHandle& sandbox, std::vector<std::string> argv, TarIo& io) {
  ExecRequest request;
  request.argv = std::move(argv);
  request.attach_stdin = io.stdin_fd() >= 0;
  const int signals_before = interrupt::count();
  const int status = driver.exec(sandbox, request, io);
  if (interrupt::count() != signals_before) {
    // The signal went on to tar in the sandbox; the copy did not complete, whatever it answered.
    throw Interrupted(interrupt::last_signal());
  }
  return status;
}

[[noreturn]] void tar_failed(const SandboxHandle& sandbox, std::string_view what, int status,
                             const TarIo& io) {
  if (status == 127) {
    throw DriverError(DriverError::Kind::unsupported,
                      fmt::format("sandbox {} has no 'tar': sandboxer cp needs it in the sandbox "
                                  "when the driver copies over exec (docs/cp.md)",
                                  sandbox.sandbox_id));
  }
  const std::string said = io.stderr_line();
  if (said.find("No space left") != std::string::npos ||
      said.find("No such file") == std::string::npos) {
    throw DriverError(DriverError::Kind::error,
                      fmt::format("{} in sandbox {} failed (tar exited {}){}{}", what,
                                  sandbox.sandbox_id, status, said.empty() ? "" : ": ", said));
  }
  throw DriverError(DriverError::Kind::not_found,
                    fmt::format("{} in sandbox {}: {}", what, sandbox.sandbox_id, said));
}

// The parent directory and base name of an absolute path in the sandbox.
std::pair<std::string, std::string> split_path(const std::string& path) {
  std::filesystem::path p(path);
  while (p.has_relative_path() && p.filename().empty()) {
    p = p.parent_path(); // "/a/b/" -> "/a/b"
  }
  return {p.parent_path().string(), p.filename().string()};
}

} // namespace

PathInfo stat_over_exec(Driver& driver, const SandboxHandle& sandbox, const std::string& path) {
  // One exec: `ls -d -L -l` follows links, as stat(2) does, and its first letter is the kind
  // (GNU and BusyBox alike). A missing path (or a link to nothing) says "No such file".
  std::string listing;
  TarIo io([&](std::string_view bytes) {
    if (listing.size() < 4096) {
      listing.append(bytes);
    }
  });
  const int status = run(driver, sandbox, {"ls", "-d", "-L", "-l", path}, io);
  PathInfo info;
  if (status == 0 && !listing.empty()) {
    info.kind = listing.front() == 'd'   ? PathInfo::Kind::directory
                : listing.front() == '-' ? PathInfo::Kind::file
                                         : PathInfo::Kind::other;
    return info;
  }
  if (status != 0 && status != 127 && io.stderr_line().find("No such file") != std::string::npos) {
    return info; // missing
  }
  throw DriverError(
      status == 127 ? DriverError::Kind::unsupported : DriverError::Kind::error,
      fmt::format("sandbox {}: 'ls -d -L -l {}' exited {}{}{}", sandbox.sandbox_id, path, status,
                  status == 127 ? " (no 'ls' in the sandbox: cp over exec needs it)" : "",
                  io.stderr_line().empty() ? "" : ": " + io.stderr_line()));
}

void copy_in_over_exec(Driver& driver, const SandboxHandle& sandbox, const CopyInRequest& request,
                       CopySource& source) {
  std::vector<std::string> argv = {"tar", "-x", "-f", "-", "-C", request.directory};
  if (!request.owner) {
    argv.push_back("-o"); // GNU and BusyBox alike: files belong to whoever runs tar
  }
  TarIo io([](std::string_view) {});
  const int status = with_source_as_fd(source, [&](int fd) {
    io.set_stdin(fd);
    return run(driver, sandbox, argv, io);
  });
  if (status != 0) {
    tar_failed(sandbox, fmt::format("copying into {}", request.directory), status, io);
  }
}

void copy_out_over_exec(Driver& driver, const SandboxHandle& sandbox, const CopyOutRequest& request,
                        CopySink& sink) {
  auto [parent, name] = split_path(request.path);
  if (name.empty()) {
    throw DriverError(DriverError::Kind::unsupported,
                      fmt::format("cp: '{}' names no file or directory", request.path));
  }
  std::vector<std::string> argv = {"tar", "-c", "-f", "-", "-C", parent.empty() ? "/" : parent};
  if (request.follow) {
    argv.push_back("-h");
  }
  // "./" keeps a name that starts with '-' from reading as an option.
  argv.push_back("./" + name);
  TarIo io([&](std::string_view bytes) { sink.write(bytes); });
  const int status = run(driver, sandbox, std::move(argv), io);
  if (status != 0) {
    tar_failed(sandbox, fmt::format("copying {}", request.path), status, io);
  }
}

} // namespace sandboxer
