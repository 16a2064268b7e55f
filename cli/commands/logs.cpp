#include <CLI/CLI.hpp>
#include <cerrno>
#include <fmt/format.h>
#include <unistd.h>

#include <sandboxer/duration.hpp>

#include "cli/commands/commands.hpp"
#include "core/errors.hpp"

namespace sandboxer::commands {
namespace {

struct LogsArgs {
  std::string id;
  bool follow = false;
  std::optional<std::string> since;
  std::optional<std::size_t> tail;
};

// The reader of our output went away (`logs -f | head -3`): stop following, quietly.
struct ReaderGone {};

// Each line goes out as soon as it arrives, so that `logs -f` is live in a pipe too. Text: the
// line on our stdout or stderr, as the sandbox wrote it (as `docker logs` does). JSON: one object
// a line (docs/json-output.md, "logs"). YAML: one flow mapping a sequence item, which is a YAML
// sequence however long it grows.
class PrintingSink : public LogSink {
public:
  explicit PrintingSink(Format format) : m_format(format) {}
  void line(const LogLine& line) override {
    if (m_format == Format::table) {
      std::string text = line.text + "\n";
      write_all(line.stream == "stderr" ? STDERR_FILENO : STDOUT_FILENO, text);
      return;
    }
    nlohmann::json item = {{"time", line.time ? nlohmann::json(format_time(*line.time)) : nullptr},
                           {"stream", line.stream},
                           {"line", line.text}};
    // A sandbox may print bytes that are not UTF-8: replaced, never a failed dump.
    std::string text = item.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    write_all(STDOUT_FILENO, (m_format == Format::yaml ? "- " : "") + text + "\n");
  }

private:
  static void write_all(int fd, std::string_view bytes) {
    while (!bytes.empty()) {
      ssize_t n = ::write(fd, bytes.data(), bytes.size());
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n <= 0) {
        throw ReaderGone{}; // SIGPIPE is ignored: a closed pipe is EPIPE here
      }
      bytes.remove_prefix(static_cast<size_t>(n));
    }
  }
  Format m_format;
};

ExitCode run_logs(Context& context, const LogsArgs& args) {
  LogsRequest request;
  request.follow = args.follow;
  request.tail = args.tail;
  if (args.since) {
    request.since = since_option("--since", *args.since, context.clock().now());
  }
  PrintingSink sink(context.out().format());
  try {
    context.engine().logs(args.id, request, sink);
  } catch (const ReaderGone&) {
    // What `cat` does when its reader closes: nothing more to say.
  }
  return ExitCode::ok;
}

} // namespace

void setup_logs(CLI::App& app, Runner& runner) {
  auto args = std::make_shared<LogsArgs>();
  app.add_option("id", args->id, "Sandbox id or name")->required();
  app.add_flag("-f,--follow", args->follow,
               "Keep printing new output until the sandbox stops (or Ctrl-C)");
  app.add_option("--since", args->since,
                 "Only output since a duration ago (10m) or a time (RFC 3339)");
  app.add_option("--tail", args->tail, "Only the last N lines (then new ones with --follow)");
  app.footer("The sandbox's own output: docker's main process, compose-ssh's services, e2b's "
             "sandbox log, modal's entrypoint, vm-packer's serial console, stub's console file "
             "(drivers without logs exit 4). -o json prints one {time, stream, line} object a "
             "line. Read-only: no history entry, no event.");
  runner = [args](Context& context) { return run_logs(context, *args); };
}

} // namespace sandboxer::commands
