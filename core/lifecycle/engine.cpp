// The lifecycle engine: every operation as intent, backend call, outcome (docs/architecture.md).
// This file holds what every verb uses: opening a driver where the sandbox lives, committing to
// the ledger, recording outcomes. The verbs are in engine_create, engine_destroy,
// engine_snapshot and engine_running.
#include "core/errors.hpp"
#include "core/lifecycle/engine_internal.hpp"

namespace sandboxer {
using namespace lifecycle_rules;

namespace engine_internal {

[[noreturn]] void throw_not_found(const Ledger& ledger, const std::string& id_or_name) {
  throw NotFoundError(fmt::format("no sandbox \"{}\" in ledger {} ('sandboxer list -a' shows them)",
                                  id_or_name, ledger.location()));
}

SandboxRecord& find_or_throw(const Ledger& ledger, Ledger::Transaction& tx,
                             const std::string& id_or_name) {
  auto* record = tx.find(id_or_name);
  if (!record) {
    throw_not_found(ledger, id_or_name);
  }
  return *record;
}

void require(const DriverFactory& factory, bool capable, std::string_view verb) {
  if (!capable) {
    throw DriverError(DriverError::Kind::unsupported,
                      fmt::format("{} is not supported by driver {}", verb, factory.name()));
  }
}

// Whether a create that failed with `e` may have left something on the backend: a failure or a
// timeout may come after the backend committed; a refusal (a bad spec, a wrong key, a cap) comes
// before it does anything. An unreachable backend counts as a failure: a driver that makes
// several calls may have made the first before the connection broke.
bool may_have_made_something(const Error& e) {
  const auto* driver_error = dynamic_cast<const DriverError*>(&e);
  return driver_error && (driver_error->kind() == DriverError::Kind::error ||
                          driver_error->kind() == DriverError::Kind::timeout ||
                          driver_error->kind() == DriverError::Kind::unavailable);
}

// What to do about a sandbox exec cannot use, by its state: the next step, not just the refusal.
std::string not_running_hint(const SandboxRecord& record) {
  switch (record.state) {
  case State::failed:
    return fmt::format(" ({}); 'sandboxer status {}' tells why",
                       record.error.value_or("its create failed"), record.id);
  case State::destroyed:
    return "; create another";
  case State::creating:
    return fmt::format("; 'sandboxer wait {} --for running' waits until it is", record.id);
  case State::paused:
    return fmt::format("; it is paused: 'sandboxer resume {}' resumes it (or resume: {{on_exec: "
                       "true}} in its profile makes exec and cp resume it)",
                       record.id);
  default:
    return fmt::format("; 'sandboxer status {}' shows it", record.id);
  }
}

} // namespace engine_internal

using namespace engine_internal;

namespace {

class NullProgress : public Progress {
public:
  void update(std::string_view) override {}
};
NullProgress g_null_progress;

} // namespace

Engine::Engine(const Ledger& ledger, const DriverCatalog& drivers, const Clock& clock,
               EventHook& events, std::string actor)
    : m_ledger(ledger), m_drivers(drivers), m_clock(clock), m_events(events),
      m_actor(std::move(actor)), m_progress(&g_null_progress) {}

Engine::Opened Engine::open_driver(const SandboxRecord& record) const {
  if (!record.home_host.empty() && record.home_host != host_name()) {
    throw UsageError(fmt::format("sandbox {} lives on host {}: its driver ({}) reaches it only "
                                 "from there; run this on {} (this is {})",
                                 record.id.empty() ? record.name : record.id, record.home_host,
                                 record.driver, record.home_host, host_name()));
  }
  Opened opened;
  opened.factory = &m_drivers.find(record.driver);
  DriverContext context = context_of(record);
  make_private_dirs(context.data_dir);
  context.secrets = resolve_secrets(record.secret_refs);
  Location location = location_of(*opened.factory, record, context);
  warn_if_moved(record, location);
  context.location = location.used;
  opened.location = std::move(location.used);
  opened.driver =
      checked_driver(opened.factory->open(record.spec, context), record.driver, record.spec);
  return opened;
}

DriverContext Engine::context_of(const SandboxRecord& record) const {
  DriverContext context;
  context.data_dir = m_ledger.state_dir() / "drivers" / record.driver;
  context.clock = &m_clock;
  context.progress = m_progress ? m_progress : &g_null_progress;
  return context;
}

nlohmann::json Engine::location(const SandboxRecord& record) const {
  return location_of(m_drivers.find(record.driver), record, context_of(record)).used;
}

void Engine::commit(Ledger::Transaction& tx, SandboxRecord& record, size_t first_new_entry) {
  // The events go to the outbox first, in the same critical section: a crash after the ledger
  // commit cannot lose them, and one before it leaves nothing the ledger would not back.
  m_events.stage(tx.store(), record, first_new_entry);
  tx.commit();
  m_events.committed();
}

SandboxRecord Engine::update(const std::string& id,
                             const std::function<void(SandboxRecord&)>& change) {
  SandboxRecord result;
  {
    auto tx = m_ledger.begin();
    auto& record = find_or_throw(m_ledger, tx, id);
    size_t before = record.history.size();
    change(record);
    commit(tx, record, before);
    result = record;
  }
  m_events.deliver();
  return result;
}

SandboxRecord Engine::get(const std::string& id_or_name) const {
  auto record = m_ledger.find(id_or_name);
  if (!record) {
    throw_not_found(m_ledger, id_or_name);
  }
  return std::move(*record);
}

SandboxRecord Engine::record_outcome(const std::string& id, const std::string& backend_id,
                                     const char* done,
                                     const std::function<void(SandboxRecord&)>& change) {
  try {
    return update(id, change);
  } catch (const Error& e) {
    throw OutcomeNotRecorded(
        e.code(), fmt::format("sandbox {}: the backend {} it (backend id {}), but the ledger "
                              "could not record that: {}. The record still shows the operation in "
                              "progress; 'sandboxer reap' settles it from the backend, or run "
                              "'sandboxer destroy {}'",
                              id, done, backend_id.empty() ? "-" : backend_id, e.what(), id));
  }
}

void Engine::record_failure(const std::string& id, const Error& error, EventKind kind, State to,
                            const std::string& actor, const std::string& what,
                            nlohmann::json details) {
  std::string message = log::redact(error.what());
  try {
    update(id, [&](SandboxRecord& r) {
      r.error = message;
      r.transition(kind, to, m_clock.now(), actor, what + message, std::move(details));
    });
  } catch (const Error& e) {
    // The caller's error is the one to report; the record keeps its transitional state, which
    // reap repairs.
    spdlog::error("{}: could not record the failure in the ledger: {}", id, log::redact(e.what()));
  }
}

std::optional<SandboxRecord> Engine::settle(const std::string& id, size_t expected_history_size,
                                            const std::function<void(SandboxRecord&)>& change) {
  SandboxRecord result;
  {
    auto tx = m_ledger.begin();
    auto* record = tx.find(id);
    if (!record || record->history.size() != expected_history_size) {
      return std::nullopt;
    }
    size_t before = record->history.size();
    change(*record);
    commit(tx, *record, before);
    result = *record;
  }
  m_events.deliver();
  return result;
}

BackendStatus Engine::backend_status(const SandboxRecord& record) {
  return open_driver(record).driver->status(handle_of(record));
}

std::vector<RemoteResource> Engine::list_remote(const SandboxRecord& where,
                                                const Labels& selector) {
  return open_driver(where).driver->list_remote(selector);
}

} // namespace sandboxer
