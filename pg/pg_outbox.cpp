#include "pg/pg_outbox.hpp"

#include <fmt/format.h>

#include "pg/pg_store.hpp"

namespace sandboxer::ledger::pg {
namespace {

// Runs `call` on the store's connection; a connection that broke is dropped, so that the next
// delivery pass connects afresh (a failed pass only leaves events for later).
template <typename Call> auto on_connection(const PgStore& store, Call call) {
  try {
    return call(store.ready());
  } catch (const PgError& e) {
    if (e.failure() == Failure::connection_lost || e.failure() == Failure::unavailable) {
      store.reset();
    }
    throw;
  }
}

} // namespace

std::vector<KeptEvent> PgOutbox::pending() const {
  auto rows = on_connection(m_store, [](Connection& c) {
    return c.query("SELECT seq, event_id, sandbox_id, type, body FROM sandboxer.events ORDER BY "
                   "seq");
  });
  std::vector<KeptEvent> events;
  for (auto& row : rows.values) {
    events.push_back({std::stoull(row.at(0).value_or("0")), row.at(1).value_or(""),
                      row.at(2).value_or(""), row.at(3).value_or(""), row.at(4).value_or("{}")});
  }
  return events;
}

void PgOutbox::remove(const std::vector<std::uint64_t>& sequences) const {
  std::string list;
  for (auto sequence : sequences) {
    list += fmt::format("{}{}", list.empty() ? "" : ",", sequence);
  }
  on_connection(m_store, [&](Connection& c) {
    return c.query("DELETE FROM sandboxer.events WHERE seq = ANY($1::bigint[])",
                   {"{" + list + "}"});
  });
}

std::uint64_t PgOutbox::cursor(const std::string& key) const {
  auto rows = on_connection(m_store, [&](Connection& c) {
    return c.query("SELECT delivered_seq FROM sandboxer.event_sinks WHERE sink_key = $1", {key});
  });
  return rows.values.empty() ? 0 : std::stoull(rows.values[0][0].value_or("0"));
}

bool PgOutbox::take_sink(const std::string& key, Seconds lease) const {
  auto rows = on_connection(m_store, [&](Connection& c) {
    return c.query("INSERT INTO sandboxer.event_sinks AS s (sink_key, holder, lease_until) "
                   "VALUES ($1, $2, now() + make_interval(secs => $3::double precision)) "
                   "ON CONFLICT (sink_key) DO UPDATE SET holder = EXCLUDED.holder, "
                   "lease_until = EXCLUDED.lease_until WHERE s.holder IS NULL OR "
                   "s.holder = EXCLUDED.holder OR s.lease_until < now()",
                   {key, m_store.process_name(), std::to_string(lease.count())});
  });
  return rows.affected == 1;
}

bool PgOutbox::advance(const std::string& key, std::uint64_t sequence, Seconds lease) const {
  // Guarded by the holder: a process that was paused past its lease cannot move back a cursor
  // that the turn's new holder has moved on.
  auto rows = on_connection(m_store, [&](Connection& c) {
    return c.query(
        "UPDATE sandboxer.event_sinks SET delivered_seq = GREATEST(delivered_seq, $2), "
        "lease_until = now() + make_interval(secs => $4::double precision) "
        "WHERE sink_key = $1 AND holder = $3",
        {key, std::to_string(sequence), m_store.process_name(), std::to_string(lease.count())});
  });
  return rows.affected == 1;
}

void PgOutbox::release_sink(const std::string& key) const {
  on_connection(m_store, [&](Connection& c) {
    return c.query("UPDATE sandboxer.event_sinks SET holder = NULL, lease_until = NULL "
                   "WHERE sink_key = $1 AND holder = $2",
                   {key, m_store.process_name()});
  });
}

} // namespace sandboxer::ledger::pg
