#include "core/cp/transfer.hpp"

#include <cerrno>
#include <chrono>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sandboxer/copy_over_exec.hpp>
#include <sandboxer/interrupt.hpp>

#include "core/cp/extract.hpp"
#include "core/cp/pack.hpp"
#include "core/errors.hpp"
#include "sdk/file_descriptor.hpp"

namespace sandboxer::cp {
namespace {

namespace fs = std::filesystem;

constexpr size_t k_read_piece = 256 * 1024;

std::string parent_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
}

std::string base_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string path_in(const std::string& directory, const std::string& name) {
  if (name.empty() || name == ".") {
    return directory;
  }
  return directory == "/" ? "/" + name : directory + "/" + name;
}

// "SRC/." (or "SRC/" + ".") asks for a directory's contents alone, as in docker cp.
bool names_contents(const std::string& path) {
  return path == "." || path.ends_with("/.");
}

// Reads the user's own tar stream from a file descriptor (stdin).
class FdSource : public CopySource {
public:
  FdSource(int fd, Meter& meter) : m_fd(fd), m_meter(meter) {}
  size_t read(char* buffer, size_t size) override {
    for (;;) {
      const ssize_t n = ::read(m_fd, buffer, size);
      if (n < 0 && errno == EINTR) {
        interrupt::check();
        continue;
      }
      if (n < 0) {
        throw Error(ExitCode::runtime, fmt::format("cp: reading stdin: {}", std::strerror(errno)));
      }
      m_meter.pass(std::string_view(buffer, static_cast<size_t>(n)));
      m_ended = n == 0;
      return static_cast<size_t>(n);
    }
  }
  bool ended() const { return m_ended; }

private:
  int m_fd;
  Meter& m_meter;
  bool m_ended = false;
};

// Hands a driver's bytes to `pass`; a failure there (a refused entry, a full disk) is kept and
// rethrown once the driver returns, rather than thrown through the driver's reading loop.
class KeepingSink : public CopySink {
public:
  explicit KeepingSink(std::function<void(std::string_view)> pass) : m_pass(std::move(pass)) {}
  void write(std::string_view bytes) override {
    if (m_failure) {
      return;
    }
    try {
      m_pass(bytes);
    } catch (...) {
      m_failure = std::current_exception();
    }
  }
  void rethrow() const {
    if (m_failure) {
      std::rethrow_exception(m_failure);
    }
  }

private:
  std::function<void(std::string_view)> m_pass;
  std::exception_ptr m_failure;
};

void write_to_fd(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      throw Error(ExitCode::runtime, fmt::format("cp: writing stdout: {}", std::strerror(errno)));
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

std::string sha256_of_file(const fs::path& path) {
  FileDescriptor file(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (file.get() < 0) {
    return "";
  }
  Sha256 digest;
  std::string piece(k_read_piece, '\0');
  for (;;) {
    const ssize_t n = ::read(file.get(), piece.data(), piece.size());
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      break;
    }
    digest.update(std::string_view(piece.data(), static_cast<size_t>(n)));
  }
  return digest.hex();
}

// The stream parsed wrong, a name refused, a local file unreadable: each its own exit code.
template <typename F> void translating(const std::string& sandbox_id, bool into_sandbox, F&& body) {
  try {
    body();
  } catch (const tar::Error& e) {
    if (into_sandbox) {
      throw UsageError(fmt::format("cp: stdin is not a whole tar stream: {}", e.what()));
    }
    throw DriverError(
        DriverError::Kind::error,
        fmt::format("cp: refused the stream from sandbox {}: {}", sandbox_id, e.what()));
  } catch (const ExtractError& e) {
    throw DriverError(
        DriverError::Kind::error,
        fmt::format("cp: refused the stream from sandbox {}: {}", sandbox_id, e.what()));
  } catch (const PackError& e) {
    throw Error(ExitCode::runtime, fmt::format("cp: {}", e.what()));
  }
}

std::string mismatch_message(const std::vector<std::string>& differing) {
  std::string list;
  for (size_t i = 0; i < differing.size() && i < 5; ++i) {
    list += (i ? ", " : "") + differing[i];
  }
  return fmt::format("{} file(s) differ after the copy: {}{}", differing.size(), list,
                     differing.size() > 5 ? ", ..." : "");
}

// Fills `result` in whichever way a copy ends: the history says how far it got.
struct Tally {
  CopyResult& result;
  const Digests& digests;
  const Meter& meter;
  const Extractor* extractor; // a copy out to files here
  std::chrono::steady_clock::time_point started;
  ~Tally() {
    result.files = digests.files();
    result.entries = digests.entries();
    result.bytes = digests.bytes();
    result.stream_bytes = meter.stream_bytes();
    result.file_digests = digests.digests();
    result.digests_truncated = digests.truncated();
    if (extractor) {
      result.skipped = extractor->skipped();
    }
    result.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  }
};

} // namespace

std::string sandbox_absolute(const std::string& path) {
  std::string absolute = path.starts_with('/') ? path : "/" + path;
  while (absolute.size() > 1 && absolute.back() == '/') {
    absolute.pop_back();
  }
  return absolute;
}

Channel::Channel(Driver& driver, SandboxHandle sandbox, Via via)
    : m_driver(driver), m_sandbox(std::move(sandbox)), m_via(via) {}

PathInfo Channel::stat(const std::string& path) {
  return m_via == Via::native ? m_driver.stat_path(m_sandbox, path)
                              : stat_over_exec(m_driver, m_sandbox, path);
}

void Channel::copy_in(const CopyInRequest& request, CopySource& source) {
  if (m_via == Via::native) {
    m_driver.copy_in(m_sandbox, request, source);
  } else {
    copy_in_over_exec(m_driver, m_sandbox, request, source);
  }
}

void Channel::copy_out(const CopyOutRequest& request, CopySink& sink) {
  if (m_via == Via::native) {
    m_driver.copy_out(m_sandbox, request, sink);
  } else {
    copy_out_over_exec(m_driver, m_sandbox, request, sink);
  }
}

nlohmann::json to_json(const CopyResult& result) {
  nlohmann::json digests = nlohmann::json::array();
  for (const auto& file : result.file_digests) {
    digests.push_back({{"path", file.path}, {"size", file.size}, {"sha256", file.sha256}});
  }
  return {{"direction", result.direction},
          {"via", result.via},
          {"sources", result.sources},
          {"destination", result.destination},
          {"files", result.files},
          {"entries", result.entries},
          {"bytes", result.bytes},
          {"stream_bytes", result.stream_bytes},
          {"sha256", result.sha256.empty() ? nlohmann::json() : nlohmann::json(result.sha256)},
          {"file_digests", std::move(digests)},
          {"file_digests_truncated", result.digests_truncated},
          {"skipped", result.skipped},
          {"verified", result.verified ? nlohmann::json(*result.verified) : nlohmann::json()},
          {"seconds", result.seconds}};
}

InPlan plan_copy_in(Channel& channel, const std::vector<std::string>& sources,
                    const std::string& destination, bool follow) {
  const std::string& id = channel.sandbox().sandbox_id;
  const std::string dest = sandbox_absolute(destination);
  const bool wants_directory = destination.ends_with('/') || names_contents(destination);
  const PathInfo at_dest = channel.stat(dest);
  const bool dest_is_directory = at_dest.kind == PathInfo::Kind::directory;
  InPlan plan;
  if (sources.size() == 1 && sources.front() == "-") {
    if (!dest_is_directory) {
      throw ConflictError(fmt::format("cp: {}:{} is not a directory in the sandbox: a tar stream "
                                      "unpacks into an existing directory",
                                      id, dest));
    }
    plan.directory = dest;
    plan.items.push_back({"-", "."});
    return plan;
  }
  if (sources.size() > 1 && !dest_is_directory) {
    throw ConflictError(fmt::format("cp: copying {} sources needs {}:{} to be an existing "
                                    "directory; it is {}",
                                    sources.size(), id, dest, to_string(at_dest.kind)));
  }
  for (const auto& source : sources) {
    if (source == "-") {
      throw UsageError("cp: '-' (a tar stream on stdin) is the only source when it is given");
    }
    struct stat st {};
    if ((follow ? ::stat(source.c_str(), &st) : ::lstat(source.c_str(), &st)) != 0) {
      throw NotFoundError(fmt::format("cp: {}: {}", source, std::strerror(errno)));
    }
    const bool is_directory = S_ISDIR(st.st_mode);
    if (names_contents(source) && !is_directory) {
      throw ConflictError(
          fmt::format("cp: {}: not a directory, so it has no contents to copy", source));
    }
    std::string base = base_of(fs::path(source).lexically_normal().string());
    while (base.empty() || base == ".") {
      // "dir/" or "dir/.": the directory's own name
      base = fs::path(source).lexically_normal().parent_path().filename().string();
      if (base.empty()) {
        base = ".";
        break;
      }
    }
    if (dest_is_directory) {
      plan.directory = dest;
      plan.items.push_back({source, names_contents(source) ? "." : base});
      continue;
    }
    if (at_dest.kind != PathInfo::Kind::missing && at_dest.kind != PathInfo::Kind::symlink &&
        is_directory) {
      throw ConflictError(fmt::format("cp: cannot copy directory {} onto {}:{}, which is a file",
                                      source, id, dest));
    }
    if (wants_directory && !is_directory) {
      throw ConflictError(fmt::format("cp: {}:{} names a directory (a trailing '/') that does not "
                                      "exist; a file is copied into an existing directory",
                                      id, destination));
    }
    const std::string parent = parent_of(dest);
    if (channel.stat(parent).kind != PathInfo::Kind::directory) {
      throw NotFoundError(
          fmt::format("cp: no directory {} in sandbox {} to copy into", parent, id));
    }
    plan.directory = parent;
    plan.items.push_back({source, base_of(dest)});
  }
  return plan;
}

OutPlan plan_copy_out(Channel& channel, const std::string& source, const std::string& destination) {
  const std::string& id = channel.sandbox().sandbox_id;
  const bool contents = names_contents(source);
  std::string path = sandbox_absolute(contents ? source.substr(0, source.size() - 1) : source);
  if (path == "/" && !contents) {
    throw UsageError("cp: copying the sandbox's whole root needs '/.' (its contents)");
  }
  const PathInfo at_source = channel.stat(path);
  if (at_source.kind == PathInfo::Kind::missing) {
    throw NotFoundError(fmt::format("cp: no such file or directory in sandbox {}: {}", id, path));
  }
  const bool source_is_directory = at_source.kind == PathInfo::Kind::directory;
  if (contents && !source_is_directory) {
    throw ConflictError(
        fmt::format("cp: {}:{} is not a directory, so it has no contents to copy", id, path));
  }
  OutPlan plan;
  plan.sandbox_path = path;
  if (destination == "-") {
    plan.to_stdout = true;
    return plan;
  }
  std::error_code ec;
  const fs::path dest(destination);
  const auto status = fs::status(dest, ec);
  if (fs::is_directory(status)) {
    plan.local_directory = dest;
    plan.top = contents ? "" : base_of(path);
    return plan;
  }
  if (fs::exists(status) && source_is_directory) {
    throw ConflictError(fmt::format("cp: cannot copy directory {}:{} onto {}, which is a file", id,
                                    path, destination));
  }
  if (!fs::exists(status) && destination.ends_with('/') && !source_is_directory) {
    throw ConflictError(fmt::format("cp: {} names a directory (a trailing '/') that does not "
                                    "exist; a file is copied into an existing directory",
                                    destination));
  }
  fs::path normal = dest.lexically_normal();
  if (!normal.has_filename()) {
    normal = normal.parent_path();
  }
  plan.local_directory = normal.has_parent_path() ? normal.parent_path() : fs::path(".");
  if (!fs::is_directory(plan.local_directory, ec)) {
    throw NotFoundError(fmt::format("cp: no directory {} on this machine to copy into",
                                    plan.local_directory.string()));
  }
  plan.top = normal.filename().string();
  return plan;
}

void copy_in(Channel& channel, const InPlan& plan, const CopyOptions& options, CopyResult& result) {
  const auto started = std::chrono::steady_clock::now();
  result.direction = "in";
  result.via = channel.via_name();
  for (const auto& item : plan.items) {
    result.sources.push_back(item.local.string());
  }
  result.destination =
      plan.items.size() == 1 ? path_in(plan.directory, plan.items.front().name) : plan.directory;
  Digests digests([&](const std::string& name) { return path_in(plan.directory, name); });
  Meter meter(digests, options.progress);
  Tally tally{result, digests, meter, nullptr, started};
  CopyInRequest request;
  request.directory = plan.directory;
  if (options.owner) {
    request.owner = fmt::format("{}:{}", options.owner->first, options.owner->second);
  }
  translating(channel.sandbox().sandbox_id, true, [&] {
    if (plan.items.front().local == "-") {
      FdSource source(STDIN_FILENO, meter);
      channel.copy_in(request, source);
      if (!source.ended()) {
        throw DriverError(DriverError::Kind::error,
                          "cp: the driver stopped reading before the end of the stream");
      }
    } else {
      uint64_t skipped = 0;
      ProducedSource source(
          [&](const std::function<void(std::string_view)>& emit) {
            tar::Writer writer(emit);
            PackOptions pack;
            pack.follow = options.follow;
            pack.owner = options.owner;
            Packer packer(writer, pack);
            for (const auto& item : plan.items) {
              packer.add(item.local, item.name);
            }
            writer.finish();
            skipped = packer.skipped();
          },
          meter);
      channel.copy_in(request, source);
      if (!source.exhausted()) {
        throw DriverError(DriverError::Kind::error,
                          "cp: the driver answered before it had read the whole stream");
      }
      result.skipped = skipped;
    }
    meter.finish();
  });
  result.sha256 = meter.sha256();
  if (!options.verify) {
    return;
  }
  // Read back what is there now, and compare each file sent with it.
  std::map<std::string, std::string> found;
  for (const auto& item : plan.items) {
    Digests again([](const std::string& name) { return name; });
    const bool contents = item.name == ".";
    const std::string path = path_in(plan.directory, item.name);
    Renamer strip(again, base_of(path), "");
    tar::Sink& sink = contents ? static_cast<tar::Sink&>(strip) : again;
    Meter reread(sink, nullptr);
    KeepingSink keeping([&](std::string_view bytes) { reread.pass(bytes); });
    translating(channel.sandbox().sandbox_id, false, [&] {
      channel.copy_out({path, false}, keeping);
      keeping.rethrow();
      reread.finish();
    });
    found.insert(again.by_name().begin(), again.by_name().end());
  }
  std::vector<std::string> differing;
  for (const auto& [name, sha256] : digests.by_name()) {
    auto it = found.find(name);
    if (it == found.end() || it->second != sha256) {
      differing.push_back(path_in(plan.directory, name));
    }
  }
  result.verified = differing.empty();
  if (!differing.empty()) {
    throw Error(ExitCode::unverified, "cp --verify: " + mismatch_message(differing));
  }
}

void copy_out(Channel& channel, const OutPlan& plan, const CopyOptions& options,
              CopyResult& result) {
  const auto started = std::chrono::steady_clock::now();
  result.direction = "out";
  result.via = channel.via_name();
  result.sources = {plan.sandbox_path};
  result.destination = plan.to_stdout ? "-" : (plan.local_directory / plan.top).string();
  const std::string parent = parent_of(plan.sandbox_path);
  Digests digests([&](const std::string& name) { return path_in(parent, name); });
  std::optional<Extractor> extractor;
  std::optional<Renamer> renamer;
  std::optional<Tee> tee;
  if (!plan.to_stdout) {
    extractor.emplace(plan.local_directory);
    renamer.emplace(*extractor, base_of(plan.sandbox_path), plan.top);
    tee.emplace(digests, *renamer);
  }
  Meter meter(tee ? static_cast<tar::Sink&>(*tee) : digests, options.progress);
  Tally tally{result, digests, meter, extractor ? &*extractor : nullptr, started};
  KeepingSink sink([&](std::string_view bytes) {
    meter.pass(bytes);
    if (plan.to_stdout) {
      write_to_fd(STDOUT_FILENO, bytes);
    }
  });
  translating(channel.sandbox().sandbox_id, false, [&] {
    channel.copy_out({plan.sandbox_path, options.follow}, sink);
    sink.rethrow();
    meter.finish();
    if (extractor) {
      extractor->finish();
    }
  });
  result.sha256 = meter.sha256();
  if (!options.verify) {
    return;
  }
  if (plan.to_stdout) {
    throw UsageError("cp --verify: a stream written to stdout cannot be read back");
  }
  std::vector<std::string> differing;
  for (const auto& [name, sha256] : digests.by_name()) {
    const fs::path local = plan.local_directory / renamer->renamed(name);
    if (sha256_of_file(local) != sha256) {
      differing.push_back(local.string());
    }
  }
  result.verified = differing.empty();
  if (!differing.empty()) {
    throw Error(ExitCode::unverified, "cp --verify: " + mismatch_message(differing));
  }
}

} // namespace sandboxer::cp
