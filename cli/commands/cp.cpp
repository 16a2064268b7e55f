#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fmt/format.h>
#include <unistd.h>

#include <sandboxer/log.hpp>

#include "cli/commands/commands.hpp"
#include "core/errors.hpp"

namespace sandboxer::commands {
namespace {

struct CpArgs {
  std::vector<std::string> paths;
  bool follow = false;
  std::optional<std::string> owner;
  bool verify = false;
  std::string via = "any";
  bool progress = false;
  bool no_progress = false;
};

// "ID:PATH" names a path in sandbox ID (an id, a name or an id's prefix); a local path with a
// colon is written "./a:b", as with docker cp: before the colon, a sandbox reference has no '/'.
struct SandboxPath {
  std::string sandbox;
  std::string path;
};
std::optional<SandboxPath> sandbox_path_of(const std::string& arg) {
  const size_t colon = arg.find(':');
  if (colon == std::string::npos || colon == 0 ||
      arg.substr(0, colon).find('/') != std::string::npos) {
    return std::nullopt;
  }
  return SandboxPath{arg.substr(0, colon), arg.substr(colon + 1)};
}

std::pair<int64_t, int64_t> owner_of(const std::string& text) {
  const size_t colon = text.find(':');
  auto number = [&](const std::string& part) -> std::optional<int64_t> {
    if (part.empty() || part.size() > 10 ||
        part.find_first_not_of("0123456789") != std::string::npos) {
      return std::nullopt;
    }
    return std::stoll(part);
  };
  auto uid = number(text.substr(0, colon));
  auto gid = colon == std::string::npos ? uid : number(text.substr(colon + 1));
  if (!uid || !gid) {
    throw UsageError(fmt::format("--owner \"{}\": expected UID:GID in numbers (1000:1000), as the "
                                 "sandbox's own users may not be known here",
                                 text));
  }
  return {*uid, *gid};
}

// A line on a terminal, rewritten at most five times a second: bytes so far and the rate.
class ProgressLine {
public:
  explicit ProgressLine(bool shown) : m_shown(shown), m_started(Clock::now()), m_last(m_started) {}
  ~ProgressLine() { clear(); }
  void update(uint64_t bytes) {
    const auto now = Clock::now();
    if (!m_shown || now - m_last < std::chrono::milliseconds(200)) {
      return;
    }
    m_last = now;
    const double seconds = std::chrono::duration<double>(now - m_started).count();
    std::fprintf(stderr, "\r\033[Kcp: %s, %s/s", human_bytes(bytes).c_str(),
                 human_bytes(static_cast<uint64_t>(bytes / std::max(seconds, 0.001))).c_str());
    std::fflush(stderr);
    m_drawn = true;
  }
  void clear() {
    if (m_drawn) {
      std::fputs("\r\033[K", stderr);
      std::fflush(stderr);
      m_drawn = false;
    }
  }

private:
  using Clock = std::chrono::steady_clock;
  bool m_shown;
  bool m_drawn = false;
  Clock::time_point m_started;
  Clock::time_point m_last;
};

ExitCode run_cp(Context& context, const CpArgs& args) {
  if (args.paths.size() < 2) {
    throw UsageError("cp needs a source and a destination: cp SRC... ID:DEST, or cp ID:SRC DEST");
  }
  CopyRequest request;
  std::string sandbox;
  const auto dest = sandbox_path_of(args.paths.back());
  std::vector<std::string> sources(args.paths.begin(), args.paths.end() - 1);
  if (dest) {
    request.direction = CopyRequest::Direction::in;
    for (const auto& source : sources) {
      if (sandbox_path_of(source)) {
        throw UsageError(fmt::format("cp: {} and {} are both in sandboxes: copy out, then in (a "
                                     "local path with a colon is written ./{})",
                                     source, args.paths.back(), source));
      }
    }
    sandbox = dest->sandbox;
    request.sources = sources;
    request.destination = dest->path.empty() ? "/" : dest->path;
  } else {
    if (sources.size() != 1 || !sandbox_path_of(sources.front())) {
      throw UsageError("cp: one side must be in a sandbox, written ID:PATH: cp SRC... ID:DEST, or "
                       "cp ID:SRC DEST");
    }
    const auto source = *sandbox_path_of(sources.front());
    request.direction = CopyRequest::Direction::out;
    sandbox = source.sandbox;
    request.sources = {source.path.empty() ? "/." : source.path};
    request.destination = args.paths.back();
    if (args.owner) {
      throw UsageError(
          "cp --owner applies to a copy into a sandbox; what comes out belongs to you");
    }
    if (request.destination == "-" && context.out().format() != Format::table) {
      throw UsageError("cp ID:SRC -: stdout carries the tar stream; -o json has no room there");
    }
  }
  request.via = args.via == "native" ? CopyRequest::Via::native
                : args.via == "exec" ? CopyRequest::Via::exec
                                     : CopyRequest::Via::any;
  request.options.follow = args.follow;
  request.options.verify = args.verify;
  if (args.owner) {
    request.options.owner = owner_of(*args.owner);
  }
  ProgressLine progress(!args.no_progress && (args.progress || isatty(STDERR_FILENO)) &&
                        !context.out().quiet());
  request.options.progress = [&](uint64_t bytes) { progress.update(bytes); };
  const auto record = context.engine().get(sandbox);
  cp::CopyResult result = context.engine().copy(sandbox, request);
  progress.clear();
  nlohmann::json data = cp::to_json(result);
  data["id"] = record.id;
  data["name"] = record.name;
  if (context.out().format() == Format::table) {
    if (!context.out().quiet()) {
      // On stderr: with DEST "-", stdout is the stream.
      std::fprintf(
          stderr, "%s\n",
          fmt::format("{} {} file(s), {} {} {}:{} ({}, {:.1f} s{})",
                      result.direction == "in" ? "copied" : "copied", result.files,
                      human_bytes(result.bytes), result.direction == "in" ? "into" : "out of",
                      record.id,
                      result.direction == "in" ? result.destination : result.sources.front(),
                      result.via, result.seconds, result.verified ? ", verified" : "")
              .c_str());
    }
    return ExitCode::ok;
  }
  context.out().print(data, [] { return Table{}; });
  return ExitCode::ok;
}

} // namespace

void setup_cp(CLI::App& app, Runner& runner) {
  auto args = std::make_shared<CpArgs>();
  app.add_option("paths", args->paths, "SRC... ID:DEST (into a sandbox) or ID:SRC DEST (out of it)")
      ->required();
  app.add_flag("-L,--follow", args->follow,
               "Copy what symbolic links point to, not the links (a loop is refused)");
  app.add_option("--owner", args->owner,
                 "UID:GID to own the files copied in, where the driver allows (else exit 7)");
  app.add_flag("--verify", args->verify,
               "Read the destination back and compare every file's SHA-256 (exit 8 when one "
               "differs)");
  app.add_option("--via", args->via,
                 "native: the driver's own copy; exec: tar over its exec; any (default): native "
                 "where the driver has it")
      ->check(CLI::IsMember({"any", "native", "exec"}));
  app.add_flag("--progress", args->progress, "A progress line on stderr even off a terminal");
  app.add_flag("--no-progress", args->no_progress, "No progress line, even on a terminal");
  app.footer("Files and directories (recursively), keeping modes and modification times; links "
             "are copied as links. SRC '-' reads a tar stream from stdin, DEST '-' writes one to "
             "stdout. As with docker cp: DEST that is a directory receives SRC inside it; a "
             "missing DEST is SRC under that name; SRC/. copies a directory's contents. Each copy "
             "is a files.copied history entry with the SHA-256 of every file (docs/cp.md). "
             "Exit 3: a missing source; 7: the driver cannot copy; 8: --verify found a "
             "difference; 10: the sandbox is not running, or a directory meets a file.");
  runner = [args](Context& context) { return run_cp(context, *args); };
}

} // namespace sandboxer::commands
