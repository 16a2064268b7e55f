// `sandboxer run`: create, copy in, exec, copy out, destroy, as one command, holding the sandbox by
// a lease that lapses when this process dies in any way (docs/run.md).
#include <CLI/CLI.hpp>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <mutex>
#include <spdlog/spdlog.h>
#include <thread>

#include <sandboxer/interrupt.hpp>
#include <sandboxer/log.hpp>

#include "cli/commands/command_thread.hpp"
#include "cli/commands/commands.hpp"
#include "cli/commands/exec_io.hpp"
#include "core/errors.hpp"
#include "core/evidence.hpp"
#include "core/sha256.hpp"
#include "sdk/json/utf8.hpp"

namespace sandboxer::commands {
namespace {

using SteadyClock = std::chrono::steady_clock;

// After --stop-timeout and the destroy, how long the command's exec is given to notice.
constexpr auto k_join_after_destroy = std::chrono::seconds(10);

struct RunArgs {
  CreateFlags flags;
  std::string lease = "2m";
  std::string stop_timeout = "10s";
  ExecFlags exec;
  std::vector<std::string> cp_in;
  std::vector<std::string> cp_out;
  bool keep = false;
  bool keep_on_failure = false;
  std::optional<std::string> evidence;
  std::vector<std::string> command;
};

// What a --cp-in or --cp-out names: a path here and one in the sandbox.
struct CopySpec {
  std::string local;
  std::string in_sandbox;
};

// --cp-in LOCAL:SANDBOX_PATH splits at the last ':' (the sandbox path is absolute and plain);
// --cp-out SANDBOX_PATH:LOCAL at the first.
CopySpec copy_spec(const std::string& option, const std::string& text, bool in) {
  const size_t colon = in ? text.rfind(':') : text.find(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) {
    throw UsageError(fmt::format("{} \"{}\": expected {}", option, text,
                                 in ? "LOCAL:SANDBOX_PATH, e.g. ./src:/work"
                                    : "SANDBOX_PATH:LOCAL, e.g. /work/out:./artifacts"));
  }
  const std::string left = text.substr(0, colon), right = text.substr(colon + 1);
  return in ? CopySpec{left, right} : CopySpec{right, left};
}

// Renews the lease from its own thread, with its own ledger connection, until stopped; a renewal
// that fails for a while (a locked or slow ledger) is retried every second, so that the lease
// survives anything shorter than about two thirds of its length.
class LeaseKeeper {
public:
  LeaseKeeper(const GlobalOptions& global, std::string id, Seconds lease)
      : m_global(global), m_id(std::move(id)),
        m_interval(std::chrono::duration_cast<std::chrono::milliseconds>(lease) / 3),
        m_thread([this] { loop(); }) {}
  ~LeaseKeeper() { stop(); }
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

  void stop() {
    {
      std::lock_guard lock(m_mutex);
      m_stopping = true;
    }
    m_wake.notify_all();
    if (m_thread.joinable()) {
      m_thread.join();
    }
  }
  int renewals() const {
    std::lock_guard lock(m_mutex);
    return m_renewals;
  }
  // Why the lease is no longer this process's, once it is not.
  std::optional<std::string> lost() const {
    std::lock_guard lock(m_mutex);
    return m_lost;
  }

private:
  void loop() {
    // Renewals go on while the main thread cleans up after a signal.
    interrupt::Shield shielded;
    std::optional<Context> context;
    auto wait = m_interval;
    while (true) {
      {
        std::unique_lock lock(m_mutex);
        if (m_wake.wait_for(lock, wait, [&] { return m_stopping; })) {
          return;
        }
      }
      try {
        if (!context) {
          context.emplace(m_global);
        }
        context->engine().renew_lease(m_id);
        std::lock_guard lock(m_mutex);
        ++m_renewals;
        wait = m_interval;
      } catch (const ConflictError& e) {
        spdlog::error("run: {}", e.what());
        std::lock_guard lock(m_mutex);
        m_lost = e.what();
        return;
      } catch (const std::exception& e) {
        spdlog::warn("run: renewing the lease of {} failed, retrying in 1s: {}", m_id,
                     log::redact(e.what()));
        context.reset(); // a fresh connection next time
        wait = std::min<std::chrono::milliseconds>(m_interval, std::chrono::seconds(1));
      }
    }
  }

  const GlobalOptions& m_global;
  std::string m_id;
  std::chrono::milliseconds m_interval;
  mutable std::mutex m_mutex;
  std::condition_variable m_wake;
  bool m_stopping = false;
  int m_renewals = 0;
  std::optional<std::string> m_lost;
  std::thread m_thread; // last: started once the rest is ready
};

// With -o json the command's output goes into the document (its last 1 MiB of each stream);
// otherwise straight to ours.
class CapturedIo : public ExecIo {
public:
  explicit CapturedIo(bool attach_stdin) : m_attach_stdin(attach_stdin) {}
  void out(std::string_view bytes) override { keep(m_out, bytes); }
  void err(std::string_view bytes) override { keep(m_err, bytes); }
  int stdin_fd() const override { return m_attach_stdin ? STDIN_FILENO : -1; }
  // (A command that outlived --stop-timeout may still be writing from its thread.)
  nlohmann::json stream(bool out) const {
    std::lock_guard lock(m_mutex);
    const auto& kept = out ? m_out : m_err;
    return {{"text", printable_utf8(kept.text)},
            {"bytes", kept.total},
            {"truncated", kept.total > kept.text.size()}};
  }

private:
  static constexpr size_t k_kept = 1 << 20;
  struct Kept {
    std::string text;
    uint64_t total = 0;
  };
  void keep(Kept& kept, std::string_view bytes) {
    std::lock_guard lock(m_mutex);
    kept.total += bytes.size();
    kept.text.append(bytes);
    if (kept.text.size() > k_kept) {
      kept.text.erase(0, kept.text.size() - k_kept);
    }
  }
  // JSON strings are UTF-8: a byte that is not part of a valid sequence (the JSON layer's own
  // check: no overlong forms, surrogates or values past U+10FFFF) becomes U+FFFD.
  static std::string printable_utf8(const std::string& bytes) {
    std::string text;
    const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
    for (size_t i = 0; i < bytes.size();) {
      const size_t length =
          p[i] < 0x80 ? 1 : json_text::utf8_sequence_length(p + i, bytes.size() - i);
      if (length > 0) {
        text.append(bytes, i, length);
        i += length;
      } else {
        text.append("\xEF\xBF\xBD");
        i += 1;
      }
    }
    return text;
  }
  bool m_attach_stdin;
  mutable std::mutex m_mutex;
  Kept m_out;
  Kept m_err;
};

// Times each phase for the document.
class Phases {
public:
  template <typename F> auto time(const char* phase, F&& work) {
    const auto started = SteadyClock::now();
    struct Record {
      Phases& phases;
      const char* phase;
      SteadyClock::time_point started;
      ~Record() {
        phases.m_seconds[phase] =
            std::chrono::duration<double>(SteadyClock::now() - started).count();
      }
    } record{*this, phase, started};
    spdlog::debug("run: {}", phase);
    return work();
  }
  nlohmann::json to_json() const {
    nlohmann::json out = nlohmann::json::object();
    for (const char* phase : {"create", "cp_in", "exec", "cp_out", "destroy"}) {
      auto found = m_seconds.find(phase);
      out[phase] = found == m_seconds.end() ? nlohmann::json() : nlohmann::json(found->second);
    }
    return out;
  }

private:
  std::map<std::string, double> m_seconds;
};

// A failure of sandboxer itself, with the phase it happened in.
struct PhaseFailure {
  std::string phase;
  ExitCode code = ExitCode::runtime;
  std::string message;
};

void write_file_atomically(const std::filesystem::path& path, const std::string& text) {
  const std::filesystem::path temporary = path.string() + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.flush()) {
      throw Error(ExitCode::runtime,
                  fmt::format("run: --evidence: cannot write {}", temporary.string()));
    }
  }
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec) {
    throw Error(ExitCode::runtime, fmt::format("run: --evidence: cannot rename {} to {}: {}",
                                               temporary.string(), path.string(), ec.message()));
  }
}

ExitCode run_run(Context& context, const RunArgs& args) {
  if (args.command.empty()) {
    throw UsageError("run needs a command after --: sandboxer run --profile P -- CMD [ARGS...]");
  }
  if (args.keep && args.keep_on_failure) {
    throw UsageError("--keep and --keep-on-failure: give one (--keep keeps it whatever happens)");
  }
  std::vector<CopySpec> ins, outs;
  for (const auto& item : args.cp_in) {
    ins.push_back(copy_spec("--cp-in", item, true));
  }
  for (const auto& item : args.cp_out) {
    outs.push_back(copy_spec("--cp-out", item, false));
  }
  const Seconds lease = duration_option("--lease", args.lease);
  const Seconds stop_timeout = duration_option("--stop-timeout", args.stop_timeout);
  const bool json = context.out().format() != Format::table;
  const ExecRequest request = exec_request_of(args.exec, args.command);
  Profile profile = profile_of(context, args.flags);
  CreateOptions options = create_options_of(args.flags);
  options.lease = lease;

  Engine& engine = context.engine();
  Phases phases;
  CreateOutcome created;
  try {
    created = phases.time("create", [&] { return engine.create(profile, options); });
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("run: create failed: {}", e.what()));
  }
  const std::string id = created.record.id;
  if (created.reused) {
    // A retried step of the same job: its sandbox is live, this process holds it from now on.
    engine.take_lease(id, lease);
  }
  LeaseKeeper keeper(context.global(), id, lease);

  nlohmann::json copies = nlohmann::json::array();
  std::optional<PhaseFailure> failure;
  std::optional<int> status;
  auto failed = [&](const char* phase, const Error& e) {
    if (!failure) {
      failure = PhaseFailure{phase, e.code(), e.what()};
    }
    spdlog::error("run: {} failed in {}: {}", phase, id, log::redact(e.what()));
  };
  auto copy = [&](Engine& by, CopyRequest::Direction direction, const CopySpec& spec) {
    CopyRequest copy_request;
    copy_request.direction = direction;
    const bool in = direction == CopyRequest::Direction::in;
    copy_request.sources = {in ? spec.local : spec.in_sandbox};
    copy_request.destination = in ? spec.in_sandbox : spec.local;
    nlohmann::json item = cp::to_json(by.copy(id, copy_request));
    item["id"] = id;
    item["name"] = created.record.name;
    copies.push_back(std::move(item));
  };

  CapturedIo captured(args.exec.interactive);
  // Declared before the command's thread, which uses them: they outlive it.
  std::optional<LocalTerminal> terminal;
  std::optional<StdIo> passed;
  std::optional<CommandThread> command;
  bool outlived = false; // the command had not ended --stop-timeout after a signal
  try {
    phases.time("cp_in", [&] {
      for (const auto& spec : ins) {
        copy(engine, CopyRequest::Direction::in, spec);
      }
    });
    terminal.emplace(args.exec.tty && !json);
    passed.emplace(args.exec.interactive, terminal->window());
    status = phases.time("exec", [&] {
      command.emplace([&] {
        return engine.exec(id, request, json ? static_cast<ExecIo&>(captured) : *passed);
      });
      return command->wait(stop_timeout);
    });
    outlived = !status;
    if (outlived) {
      terminal->restore(); // the command's terminal is ours no longer
    }
  } catch (const Interrupted&) {
    // Before the command ran (or while it was being started): nothing of it to copy out.
  } catch (const Error& e) {
    failed(status ? "exec" : copies.size() < ins.size() ? "cp-in" : "exec", e);
  }

  // The command's thread still uses this process's engine: the rest of the run gets its own.
  std::optional<Context> after_outlived;
  if (outlived) {
    spdlog::warn("run: the command in {} had not ended {} after the signal; going on without it",
                 id, format_duration(stop_timeout));
    after_outlived.emplace(context.global());
  }
  Context& rest = after_outlived ? *after_outlived : context;
  Engine& finishing = rest.engine();

  // The command's status is in (or it outlived --stop-timeout); a first signal (forwarded to the
  // command) still lets the copy-out run, a second skips it.
  const int signals = interrupt::count();
  const bool ran = status || outlived;
  if (ran && signals <= 1 && !outs.empty()) {
    interrupt::Tolerance tolerate(signals);
    try {
      phases.time("cp_out", [&] {
        for (const auto& spec : outs) {
          try {
            copy(finishing, CopyRequest::Direction::out, spec);
          } catch (const Interrupted&) {
            throw;
          } catch (const Error& e) {
            failed("cp-out", e); // the other copies are still made
          }
        }
      });
    } catch (const Interrupted&) {
      spdlog::warn("run: a second signal: the copy-out of {} stopped", id);
    }
  } else if (ran && !outs.empty()) {
    spdlog::warn("run: a second signal: no copy-out from {}", id);
  }

  keeper.stop();
  const int signal = interrupt::count() > 0 ? interrupt::last_signal() : 0;
  if (auto lost = keeper.lost(); lost && !failure) {
    failure = PhaseFailure{"lease", ExitCode::conflict, *lost};
  }
  const bool unsuccessful = failure || signal != 0 || !status || *status != 0;
  const bool keep = args.keep || (args.keep_on_failure && unsuccessful);
  bool destroyed = false;
  {
    // Cleanup runs to its end whatever the signals so far; a third one still exits at once.
    interrupt::Shield cleaning;
    try {
      // Kept: the TTL takes over. Destroyed: the lease stays through the destroy (a run killed
      // mid-destroy leaves it to reap) and ends with it.
      if (keep) {
        finishing.release_lease(id, "released (kept)");
      } else if (!keeper.lost()) {
        phases.time("destroy", [&] {
          finishing.destroy(id, signal != 0 ? "run interrupted by " + interrupt::signal_name(signal)
                                            : "run finished");
        });
        destroyed = true;
      }
    } catch (const Error& e) {
      failed(keep ? "keep" : "destroy", e);
    }
  }
  // A command that outlived --stop-timeout ends with its sandbox, and its exec with it; a kept one
  // runs on, and so does a driver's exec that never noticed the destroy.
  const bool joined = !outlived || (!keep && command->join_for(k_join_after_destroy));

  SandboxRecord record = finishing.get(id);
  nlohmann::json evidence = nullptr;
  if (args.evidence) {
    const std::string ledger_id = rest.ledger().read(ReadScope::summary).ledger_id;
    const std::string text =
        evidence_document(record, ledger_id, rest.ledger().location(), rest.clock().now()).dump(2) +
        "\n";
    write_file_atomically(*args.evidence, text);
    evidence = {{"file", *args.evidence}, {"sha256", sha256_hex(text)}};
  }

  if (keep) {
    fmt::print(stderr,
               "{}run: kept {} ({}); reach it with 'sandboxer exec {} -- sh', remove it with "
               "'sandboxer destroy {}'; it expires at {}\n",
               log::prefix(), id,
               record.state == State::running ? "running" : to_string(record.state), id, id,
               record.expires_at ? format_time(*record.expires_at) : "never (no TTL)");
  }
  if (json) {
    nlohmann::json doc = {
        {"id", id},
        {"name", record.name},
        {"profile", record.profile.name},
        {"driver", record.driver},
        {"reused", created.reused},
        {"exit_code", status ? nlohmann::json(*status) : nlohmann::json()},
        {"interrupted", signal ? nlohmann::json(interrupt::signal_name(signal)) : nlohmann::json()},
        {"failed_phase", failure ? nlohmann::json(failure->phase) : nlohmann::json()},
        {"error", failure ? nlohmann::json(log::redact(failure->message)) : nlohmann::json()},
        {"phases", phases.to_json()},
        {"copies", copies},
        {"stdout", captured.stream(true)},
        {"stderr", captured.stream(false)},
        {"lease", {{"duration", format_duration(lease)}, {"renewals", keeper.renewals()}}},
        {"kept", keep},
        {"destroyed", destroyed},
        {"outlived_stop_timeout", outlived},
        {"state", to_string(record.state)},
        {"chain_head", record.chain_head},
        {"evidence", evidence}};
    context.out().print(doc, [] { return Table{}; });
  }
  // A signal's code wins: the run was stopped, whatever else failed on the way out.
  if (signal != 0 && !joined) {
    // The command's thread cannot be joined: the process ends here, its work committed (the
    // ledger is crash-safe), the events delivered as main would.
    interrupt::Shield delivering;
    rest.events().deliver();
    fmt::print(stderr, "{}error: {}\n", log::prefix(), Interrupted(signal).what());
    std::fflush(nullptr);
    spdlog::shutdown();
    std::_Exit(128 + signal);
  }
  if (signal != 0) {
    throw Interrupted(signal);
  }
  if (failure) {
    throw Error(failure->code,
                fmt::format("run: {} failed ({}): {}", failure->phase, id, failure->message));
  }
  return static_cast<ExitCode>(*status);
}

} // namespace

void setup_run(CLI::App& app, Runner& runner) {
  auto args = std::make_shared<RunArgs>();
  add_create_flags(app, args->flags,
                   "The hard cap on the sandbox's life, e.g. 45m (capped by the profile's "
                   "ttl.max)");
  app.add_option("--lease", args->lease,
                 "While run lives, the sandbox's deadline is this short lease, renewed every third "
                 "of it; after run dies, even by SIGKILL, the next reap collects it (default 2m)");
  add_exec_flags(app, args->exec);
  app.add_option("--cp-in", args->cp_in,
                 "LOCAL:SANDBOX_PATH copied in before the command, with sandboxer cp's rules "
                 "(repeatable)")
      ->allow_extra_args(false);
  app.add_option("--cp-out", args->cp_out,
                 "SANDBOX_PATH:LOCAL copied out after the command, whatever its status "
                 "(repeatable)")
      ->allow_extra_args(false);
  app.add_option("--stop-timeout", args->stop_timeout,
                 "After Ctrl-C or SIGTERM, how long the command gets to end before run copies out "
                 "and destroys without it (default 10s)");
  app.add_flag("--keep", args->keep,
               "Leave the sandbox (its TTL then ends it) and print how to reach and remove it");
  app.add_flag("--keep-on-failure", args->keep_on_failure,
               "Leave the sandbox when the command or a phase failed");
  app.add_option(
      "--evidence", args->evidence,
      "Write the evidence document (sandboxer evidence -o json) to this file at the end");
  app.add_option("command", args->command, "The command and its arguments, after --")->required();
  app.footer("The exit code is the command's own (127: not found, 126: cannot run), or "
             "sandboxer's when a phase failed (stderr names it; docs/exit-codes.md). Ctrl-C or "
             "SIGTERM goes to the command; once it ends (or --stop-timeout passed), run copies "
             "out, destroys and exits 130/143; a second signal skips the copy-out, a third exits "
             "at once (the lease then "
             "ends the sandbox). -o json: one document with the command's output in it.");
  runner = [args](Context& context) { return run_run(context, *args); };
}

} // namespace sandboxer::commands
