#pragma once
// What the files of the engine (engine*.cpp, one per family of verbs) share: the includes, and the
// helpers each family uses. Nothing outside core/lifecycle/ includes it.

#include <fmt/format.h>
#include <fstream>
#include <spdlog/spdlog.h>
#include <sstream>
#include <sys/stat.h>

#include <sandboxer/error.hpp>
#include <sandboxer/interrupt.hpp>
#include <sandboxer/log.hpp>

#include "core/errors.hpp"
#include "core/lifecycle/checked_driver.hpp"
#include "core/lifecycle/lifecycle.hpp"
#include "core/lifecycle/location.hpp"
#include "core/lifecycle/retry.hpp"
#include "core/lifecycle/rules.hpp"
#include "core/names.hpp"
#include "core/owner.hpp"
#include "core/secrets/secrets.hpp"
#include "sdk/files.hpp"

namespace sandboxer::engine_internal {

// Times an operation for its outcome entry: the whole operation, and the driver's part of it.
class Stopwatch {
public:
  using Clock = std::chrono::steady_clock;
  static Clock::time_point now() { return Clock::now(); }

  template <typename F> auto time(F&& call) {
    auto start = now();
    struct Add {
      Stopwatch& self;
      Clock::time_point start;
      ~Add() {
        auto took = now() - start;
        self.m_driver += took;
        spdlog::debug("timing: driver call {:.1f} ms",
                      std::chrono::duration<double, std::milli>(took).count());
      }
    } add{*this, start};
    return call();
  }

  nlohmann::json details(Clock::time_point operation_started) const {
    using std::chrono::duration_cast;
    using std::chrono::milliseconds;
    return {{"duration_ms", duration_cast<milliseconds>(now() - operation_started).count()},
            {"driver_ms", duration_cast<milliseconds>(m_driver).count()}};
  }

private:
  Clock::duration m_driver{};
};

// The ledger could not record what the backend did: not a backend failure, so no failure entry
// follows (it would misstate the backend, and the same commit would likely fail again).
class OutcomeNotRecorded : public Error {
public:
  using Error::Error;
};

// Throws NotFoundError naming the ledger, with the hint to list every record.
[[noreturn]] void throw_not_found(const Ledger& ledger, const std::string& id_or_name);
SandboxRecord& find_or_throw(const Ledger& ledger, Ledger::Transaction& tx,
                             const std::string& id_or_name);
// Throws `unsupported` ("VERB is not supported by driver NAME") unless `capable`.
void require(const DriverFactory& factory, bool capable, std::string_view verb);
// Whether a create that failed with `e` may have left something on the backend.
bool may_have_made_something(const Error& e);
// What to do about a sandbox exec cannot use, by its state: the next step, not just the refusal.
std::string not_running_hint(const SandboxRecord& record);

// The checks every create makes of its options before anything is recorded (a blank
// idempotency key, a lease or TTL under a second, an invalid name or label): UsageError.
void check_create_options(const CreateOptions& options);

// A create's --lease, from its first record on (docs/run.md): `holder` holds `record` for
// `duration` from `now`, its deadline the lease's, capped by the TTL's. Returns the details that
// say so in the history entry.
nlohmann::json lease_at_create(SandboxRecord& record, Seconds duration, TimePoint now,
                               const std::string& holder);

// A create's --name must not be a live sandbox's: ConflictError-shaped exit 10 naming it.
void refuse_taken_name(Ledger::Transaction& tx, const std::optional<std::string>& name);

// The `ports.exposed` entry of a sandbox handed over with its ports (a create, a claim): who
// exposed which port where, until when; the exposure ends with the sandbox.
void record_exposure(SandboxRecord& record, TimePoint at, const std::string& actor);

} // namespace sandboxer::engine_internal
