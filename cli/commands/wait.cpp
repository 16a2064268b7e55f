// `sandboxer wait ID --for running|gone [--timeout D]` (issue 35): polls the ledger (and, for
// `running`, the backend) until the sandbox is in the state asked for. It only reads: no history
// entry, no event (docs/exit-codes.md, "wait").
#include <CLI/CLI.hpp>
#include <chrono>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <sandboxer/interrupt.hpp>

#include "cli/commands/commands.hpp"
#include "core/errors.hpp"

namespace sandboxer::commands {
namespace {

using namespace std::chrono_literals;

struct WaitArgs {
  std::string id;
  std::string condition; // running | gone
  std::string timeout = "5m";
};

// One look at the sandbox: met, never to be met (a failed create waited on for `running`), or not
// yet.
enum class Seen { met, impossible, not_yet };

struct Look {
  Seen seen = Seen::not_yet;
  std::optional<SandboxRecord> record; // nullopt: no such sandbox (any more)
  std::string backend_state;           // for `running`: what the backend said, "" if not asked
};

Look look(Context& context, const std::string& id, bool for_running) {
  Look result;
  try {
    result.record = context.engine().get(id);
  } catch (const NotFoundError&) {
    // Gone from the ledger too (retention pruned it): gone, and never to run again.
    result.seen = for_running ? Seen::impossible : Seen::met;
    return result;
  }
  const State state = result.record->state;
  if (!is_live(state)) {
    result.seen = for_running ? Seen::impossible : Seen::met;
    return result;
  }
  if (!for_running || state != State::running) {
    return result;
  }
  // Recorded running is half of it: the backend must say so too (a container still starting, a
  // VM that stopped behind the ledger's back).
  try {
    const BackendStatus status = context.engine().status(result.record->id);
    result.backend_state = to_string(status.state);
    if (status.state == BackendStatus::State::running) {
      result.seen = Seen::met;
    }
  } catch (const Error& e) {
    spdlog::debug("{}: cannot ask the backend yet: {}", result.record->id, e.what());
    result.backend_state = "unknown";
  }
  return result;
}

ExitCode run_wait(Context& context, const WaitArgs& args) {
  const bool for_running = args.condition == "running";
  const Seconds timeout = duration_option("--timeout", args.timeout);
  // The wait is measured on the monotonic clock: a test clock or an NTP step cannot end it early.
  const auto started = std::chrono::steady_clock::now();
  const auto deadline = started + timeout;
  // The first look tells a typo from a sandbox that went: not found now is exit 3.
  SandboxRecord first = context.engine().get(args.id);
  const std::string id = first.id;
  std::chrono::milliseconds pause = 100ms;
  Look last;
  while (true) {
    last = look(context, id, for_running);
    if (last.seen != Seen::not_yet || std::chrono::steady_clock::now() >= deadline) {
      break;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    interrupt::sleep_for(std::min(pause, std::max(left, 1ms)));
    pause = std::min(pause * 2, std::chrono::milliseconds(2s));
  }
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - started);
  const std::string state = last.record ? to_string(last.record->state) : "absent";
  nlohmann::json data = {{"id", id},
                         {"name", first.name},
                         {"for", args.condition},
                         {"met", last.seen == Seen::met},
                         {"state", state},
                         {"backend_state", last.backend_state.empty()
                                               ? nlohmann::json()
                                               : nlohmann::json(last.backend_state)},
                         {"waited_ms", waited.count()}};
  if (last.seen == Seen::met) {
    context.out().print(data, [&] {
      return Table{{}, {{id, fmt::format("{} ({})", args.condition, state)}}};
    });
    return ExitCode::ok;
  }
  if (context.out().format() != Format::table) {
    context.out().print(data, [] { return Table{}; });
  }
  if (last.seen == Seen::impossible) {
    throw Error(ExitCode::conflict,
                fmt::format("sandbox {} is {}: it will never be running{}", id, state,
                            last.record && last.record->error
                                ? fmt::format(" ({})", *last.record->error)
                                : std::string()));
  }
  throw Error(ExitCode::wait_timeout,
              fmt::format("sandbox {} is not {} after {} (--timeout): it is {}{}", id,
                          args.condition, args.timeout, state,
                          last.backend_state.empty() ? std::string()
                                                     : ", the backend says " + last.backend_state));
}

} // namespace

void setup_wait(CLI::App& app, Runner& runner) {
  auto args = std::make_shared<WaitArgs>();
  app.add_option("id", args->id, "Sandbox id or name")->required();
  app.add_option("--for", args->condition,
                 "running: recorded running and the backend says so; gone: destroyed, failed or "
                 "no longer in the ledger")
      ->required()
      ->check(CLI::IsMember({"running", "gone"}));
  app.add_option("--timeout", args->timeout, "How long to wait (default 5m); then exit 11");
  app.footer("Exit codes: 0 the condition holds, 11 --timeout ran out, 10 it never will "
             "(waiting for running on a failed or destroyed sandbox), 3 no such sandbox.");
  runner = [args](Context& context) { return run_wait(context, *args); };
}

} // namespace sandboxer::commands
