#include "pg/pg_store.hpp"

#include <chrono>
#include <fmt/format.h>
#include <set>
#include <spdlog/spdlog.h>
#include <thread>
#include <unistd.h>

#include "core/errors.hpp"
#include "core/ledger/chain.hpp"
#include "core/ledger/codec.hpp"
#include "core/ledger/document.hpp"
#include "core/ledger/fields.hpp"
#include "pg/closings.hpp"
#include "pg/keeper.hpp"
#include "pg/kept_connection.hpp"
#include "pg/libpq_connection.hpp"
#include "pg/schema.hpp"

namespace sandboxer::ledger::pg {
namespace {

using namespace std::chrono_literals;
using ledger_format::JsonReader;
using ledger_format::JsonWriter;

// Every sandboxer of the fleet agrees on it: the writers' turn (see pg_store.hpp).
constexpr std::string_view k_writer_lock = "7311459207350233202";

// A record's columns: its row, history and snapshots as JSON arrays, history length, id.
constexpr std::string_view k_whole_columns =
    "s.record, (SELECT json_agg(h.entry ORDER BY h.idx) FROM sandboxer.history h "
    "WHERE h.sandbox_id = s.id), (SELECT json_agg(p.snapshot ORDER BY p.position) FROM "
    "sandboxer.snapshots p WHERE p.sandbox_id = s.id), s.history_length, s.id";
constexpr std::string_view k_summary_columns =
    "s.record, NULL, (SELECT json_agg(p.snapshot ORDER BY p.position) FROM sandboxer.snapshots p "
    "WHERE p.sandbox_id = s.id), s.history_length, s.id";

std::string_view columns(ReadScope scope) {
  return scope == ReadScope::whole ? k_whole_columns : k_summary_columns;
}

// By id; else the live record of that name; else the newest that bore it.
constexpr std::string_view k_find_order =
    " FROM sandboxer.sandboxes s WHERE s.id = $1 OR s.name = $1 ORDER BY (s.id = $1) DESC, "
    "(s.state NOT IN ('destroyed', 'failed')) DESC, s.created_at DESC, s.position DESC LIMIT 1";

std::string unix_seconds(TimePoint time) {
  return std::to_string(time.time_since_epoch().count());
}
Param unix_seconds(const std::optional<TimePoint>& time) {
  return time ? Param(unix_seconds(*time)) : std::nullopt;
}
TimePoint last_time(const SandboxRecord& record) {
  return record.history.empty() ? record.created_at : record.history.back().time;
}

template <typename Value> std::string to_json_text(const Value& value) {
  std::string text;
  JsonWriter out(text);
  ledger_format::write_value(out, value);
  return text;
}

SandboxRecord decode(const std::string& where, const std::vector<std::optional<std::string>>& row,
                     ReadScope scope) {
  return record_from_row(where, row.at(0).value_or("{}"), row.at(1), row.at(2), scope);
}

// Retries `attempt` while the server is unreachable or the connection broke before anything
// was committed, with growing pauses, until `deadline`.
template <typename Attempt>
auto with_reconnects(const PgStore& store, std::chrono::steady_clock::time_point deadline,
                     Attempt attempt) {
  auto pause = 50ms;
  while (true) {
    try {
      return attempt();
    } catch (const PgError& e) {
      const bool transient = e.failure() == Failure::unavailable ||
                             e.failure() == Failure::connection_lost ||
                             e.failure() == Failure::retryable;
      if (!transient) {
        throw;
      }
      if (std::chrono::steady_clock::now() + pause >= deadline) {
        throw PgError(e.failure(), e.sqlstate(),
                      fmt::format("{}; gave up after {}s of retries (--lock-timeout)", e.what(),
                                  store.options().lock_timeout.count()));
      }
      spdlog::info("{}; trying again", e.what());
      store.reset();
      std::this_thread::sleep_for(pause);
      pause = std::min<std::chrono::milliseconds>(pause * 2, 1s);
    }
  }
}

// What a commit writes, in order, and which statements guard against another writer: such a
// statement must touch exactly one row, else the commit stops with its message.
struct Changes {
  std::vector<Connection::Statement> statements;
  std::map<size_t, std::string> guards;
  ChainPosition chain; // where the chain of closed records is once they are written
  void add(Connection::Statement statement) { statements.push_back(std::move(statement)); }
  void add_guard(Connection::Statement statement, std::string conflict) {
    guards[statements.size()] = std::move(conflict);
    add(std::move(statement));
  }
};

class PgTransaction : public LedgerStore::Transaction {
public:
  explicit PgTransaction(const PgStore& store) : m_store(store) {
    m_data.sandboxes.reserve(64);
    start();
  }

  ~PgTransaction() override {
    if (m_open) {
      try {
        m_store.ready().query("ROLLBACK");
      } catch (...) {
        m_store.reset(); // the server rolls back what a dropped connection left open
      }
    }
  }

  // Whole rows read in this transaction join m_data, each once: a record loaded before (and
  // maybe changed since) stays as this transaction has it.
  void adopt(const Rows& rows) {
    std::vector<SandboxRecord> loaded;
    for (const auto& row : rows.values) {
      if (!m_known.contains(row.at(4).value_or(""))) {
        loaded.push_back(decode(where(), row, ReadScope::whole));
      }
    }
    m_data.sandboxes.reserve(m_data.sandboxes.size() + loaded.size() + 64);
    for (auto& record : loaded) {
      remember(record);
      m_data.sandboxes.push_back(std::move(record));
    }
  }

  LedgerData& data() override {
    auto rows = connection().query(fmt::format("SELECT {} FROM sandboxer.sandboxes s WHERE "
                                               "s.resident ORDER BY s.position",
                                               k_whole_columns));
    adopt(rows);
    return m_data;
  }

  SandboxRecord* find(const std::string& id_or_name) override {
    return load_one(fmt::format("SELECT {}{}", k_whole_columns, k_find_order), {id_or_name});
  }

  SandboxRecord* find_live_by_key(const std::string& key) override {
    return load_one(fmt::format("SELECT {} FROM sandboxer.sandboxes s JOIN "
                                "sandboxer.idempotency_keys k ON k.sandbox_id = s.id WHERE "
                                "k.key = $1 AND s.state NOT IN ('destroyed', 'failed')",
                                k_whole_columns),
                    {key});
  }

  SandboxRecord* find_live_by_name(const std::string& name) override {
    return load_one(fmt::format("SELECT {} FROM sandboxer.sandboxes s WHERE s.name = $1 AND "
                                "s.state NOT IN ('destroyed', 'failed') LIMIT 1",
                                k_whole_columns),
                    {name});
  }

  std::pair<SandboxRecord*, const SnapshotRecord*> find_snapshot(const std::string& ref) override {
    auto colon = ref.find(':');
    SandboxRecord* record =
        colon == std::string::npos
            ? load_one(fmt::format("SELECT {} FROM sandboxer.sandboxes s JOIN sandboxer.snapshots "
                                   "p ON p.sandbox_id = s.id WHERE p.id = $1",
                                   k_whole_columns),
                       {ref})
            : load_one(fmt::format("SELECT {} FROM sandboxer.sandboxes s JOIN sandboxer.snapshots "
                                   "p ON p.sandbox_id = s.id WHERE (s.id = $1 OR s.name = $1) AND "
                                   "p.name = $2 ORDER BY s.created_at DESC LIMIT 1",
                                   k_whole_columns),
                       {ref.substr(0, colon), ref.substr(colon + 1)});
    const SnapshotRecord* snap = record ? snapshot_of(*record, ref) : nullptr;
    return {snap ? record : nullptr, snap};
  }

  // One query on sandboxes_pooled instead of the whole live part: the pool's unclaimed rows,
  // locked until the transaction ends. The choice among them is the default's
  // (pool_members_among), over what the transaction holds: a record it loaded or changed
  // already counts as it is here, and one it inserted counts too.
  std::vector<SandboxRecord*> pool_members(const std::string& key) override {
    auto rows = connection().query(
        fmt::format("SELECT {} FROM sandboxer.sandboxes s WHERE s.state IN ('pooled', "
                    "'creating') AND s.record->'pool'->>'key' = $1 AND "
                    "s.record->'pool'->>'claimed_at' IS NULL ORDER BY s.created_at, s.position "
                    "FOR UPDATE OF s",
                    k_whole_columns),
        {key});
    adopt(rows);
    return pool_members_among(m_data.sandboxes, key);
  }

  SandboxRecord& insert(SandboxRecord record) override {
    m_data.sandboxes.push_back(std::move(record));
    return m_data.sandboxes.back();
  }

  const std::string& ledger_id() override { return m_data.ledger_id; }
  std::uint64_t next_event_seq() override { return ++m_data.event_seq; }

  void adopt(const std::string& ledger_id, std::uint64_t event_seq) override {
    m_adopted_id = ledger_id != m_data.ledger_id;
    m_data.ledger_id = ledger_id;
    m_data.event_seq = std::max(m_data.event_seq, event_seq);
  }

  bool event_committed(const std::string& event_id) override {
    return !connection()
                .query("SELECT 1 FROM sandboxer.history WHERE event_id = $1", {event_id})
                .values.empty();
  }

  bool claim(const std::string& id, const std::string& holder, Seconds lease) override {
    auto rows = connection().query(
        "UPDATE sandboxer.sandboxes SET claimed_by = $2, claim_expires = now() + "
        "make_interval(secs => $3::double precision) WHERE id = (SELECT id FROM "
        "sandboxer.sandboxes WHERE id = $1 AND (claimed_by IS NULL OR claimed_by = $2 OR "
        "claim_expires < now()) FOR UPDATE SKIP LOCKED)",
        {id, holder, std::to_string(lease.count())});
    if (rows.affected == 1) {
      m_claimed.insert(id);
    }
    return rows.affected == 1;
  }

  bool keep_event(KeptEvent event) override {
    m_events.push_back(std::move(event));
    return true;
  }

  void commit() override {
    Changes changes = this->changes();
    for (const auto& event : m_events) {
      changes.add({"INSERT INTO sandboxer.events (seq, event_id, sandbox_id, origin_host, type, "
                   "body) VALUES ($1, $2, $3, $4, $5, $6)",
                   {std::to_string(event.sequence), event.event_id, event.sandbox_id,
                    m_store.options().host, event.type, event.text}});
    }
    if (m_adopted_id) {
      changes.add_guard({"UPDATE sandboxer.ledger_meta SET ledger_id = $1", {m_data.ledger_id}},
                        "the ledger_meta row is missing: the schema was damaged");
    }
    if (changes.statements.empty() && m_data.event_seq == m_seq_at_start) {
      finish("COMMIT");
      return;
    }
    changes.add({"UPDATE sandboxer.ledger_meta SET event_seq = GREATEST(event_seq, $1)",
                 {std::to_string(m_data.event_seq)}});
    auto deadline = std::chrono::steady_clock::now() + m_store.options().lock_timeout;
    bool replay = false;
    with_reconnects(m_store, deadline, [&] {
      if (replay) {
        if (already_committed()) {
          return;
        }
        start_once();
      }
      replay = true;
      // Every change in one round trip, the guards read, then COMMIT in a second.
      auto results = connection().pipeline(changes.statements);
      for (const auto& [index, conflict] : changes.guards) {
        if (results.at(index).affected != 1) {
          throw LedgerError(fmt::format("ledger {}: {}; nothing of this command was written",
                                        m_store.location(), conflict));
        }
      }
      finish("COMMIT");
    });
    for (const auto& record : m_data.sandboxes) {
      remember(record);
    }
    m_chain = changes.chain;
    m_claimed.clear();
    m_events.clear();
  }

private:
  Connection& connection() { return m_store.ready(); }
  std::string where() const { return m_store.location(); }

  // BEGIN, the writers' turn (bounded by lock_timeout, exit 5 past it), the ledger's own row.
  void start() {
    auto deadline = std::chrono::steady_clock::now() + m_store.options().lock_timeout;
    with_reconnects(m_store, deadline, [&] { start_once(); });
  }

  // start() without the retries, for a caller that retries already.
  void start_once() {
    auto meta = [&] {
      Connection& c = connection();
      m_open = true; // from here a failure rolls back
      try {
        // One round trip. The meta row is read by a statement of its own, after the lock is
        // granted: a statement's snapshot is taken before it waits, and would miss the event
        // numbers the writer before this one committed.
        return c.run_script(fmt::format("BEGIN; SET LOCAL lock_timeout = '{}s'; SELECT "
                                        "pg_advisory_xact_lock({}); SELECT 0, ledger_id, "
                                        "event_seq, chain_head, chain_lines FROM "
                                        "sandboxer.ledger_meta",
                                        m_store.options().lock_timeout.count(), k_writer_lock));
      } catch (const PgError& e) {
        if (e.failure() == Failure::lock_timeout) {
          throw LockTimeoutError(
              fmt::format("ledger {}: another machine's writer held the ledger for more than {}s "
                          "(--lock-timeout); nothing was changed",
                          where(), m_store.options().lock_timeout.count()));
        }
        throw;
      }
    }();
    if (meta.values.empty() || meta.values[0].size() != 5) { // else the lock's row came last
      throw LedgerError(fmt::format("ledger {} has no ledger_meta row: the schema was damaged; "
                                    "'sandboxer ledger verify' says more",
                                    where()));
    }
    m_data.ledger_id = meta.values[0][1].value_or("");
    m_seq_at_start = std::stoull(meta.values[0][2].value_or("0"));
    m_chain = {meta.values[0][3].value_or(""), std::stoull(meta.values[0][4].value_or("0"))};
    m_data.event_seq = std::max(m_data.event_seq, m_seq_at_start);
  }

  void finish(const char* how) {
    connection().query(how);
    m_open = false;
  }

  // After a connection broke during COMMIT: whether the server committed it anyway, judged by
  // the history length of the records this transaction changed.
  bool already_committed() {
    for (const auto& record : m_data.sandboxes) {
      auto known = m_known.find(record.id);
      size_t before = known == m_known.end() ? 0 : known->second.history;
      if (record.history.size() == before) {
        continue;
      }
      auto rows = connection().query("SELECT history_length FROM sandboxer.sandboxes WHERE id = $1",
                                     {record.id});
      return !rows.values.empty() &&
             rows.values[0][0].value_or("") == std::to_string(record.history.size());
    }
    return false;
  }

  SandboxRecord* load_one(const std::string& sql, const std::vector<Param>& params) {
    auto rows = connection().query(sql, params);
    if (rows.values.empty()) {
      return nullptr;
    }
    const std::string id = rows.values[0].at(4).value_or("");
    for (auto& record : m_data.sandboxes) {
      if (record.id == id) {
        return &record; // already here, perhaps changed: this copy is the transaction's
      }
    }
    SandboxRecord record = decode(where(), rows.values[0], ReadScope::whole);
    remember(record);
    m_data.sandboxes.push_back(std::move(record));
    return &m_data.sandboxes.back();
  }

  struct Known {
    size_t history = 0;
    std::string row;
    std::string snapshots;
  };
  void remember(const SandboxRecord& record) {
    m_known[record.id] = {record.history.size(), row_json(record), to_json_text(record.snapshots)};
  }

  // What commit() writes: each new or changed record, its new history entries, its snapshots.
  Changes changes() {
    Changes out;
    out.chain = m_chain;
    std::vector<ClosedRow> closed; // each write of a closed record goes on the chain
    for (auto& record : m_data.sandboxes) {
      chain::seal(record);
      auto known = m_known.find(record.id);
      const bool fresh = known == m_known.end();
      const std::string row = row_json(record);
      const std::string snapshots = to_json_text(record.snapshots);
      const size_t before = fresh ? 0 : known->second.history;
      if (!fresh && row == known->second.row && before == record.history.size() &&
          snapshots == known->second.snapshots && !m_claimed.contains(record.id)) {
        continue;
      }
      std::vector<Param> columns = {record.id,
                                    record.name,
                                    to_string(record.state),
                                    record.driver,
                                    record.home_host.empty() ? Param() : Param(record.home_host),
                                    unix_seconds(record.created_at),
                                    unix_seconds(record.expires_at),
                                    unix_seconds(last_time(record)),
                                    is_resident(record) ? "true" : "false",
                                    std::to_string(record.history.size()),
                                    row};
      if (!is_resident(record)) {
        closed.push_back({record.id, row});
      }
      if (fresh) {
        out.add_guard({"INSERT INTO sandboxer.sandboxes (id, name, state, driver, home_host, "
                       "created_at, expires_at, last_time, resident, history_length, record) "
                       "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT (id) "
                       "DO NOTHING",
                       std::move(columns)},
                      fmt::format("sandbox {} is already in the ledger", record.id));
      } else {
        columns.push_back(std::to_string(before));
        columns.push_back(m_claimed.contains(record.id) ? "true" : "false");
        out.add_guard(
            {"UPDATE sandboxer.sandboxes SET name = $2, state = $3, driver = $4, home_host = $5, "
             "created_at = $6, expires_at = $7, last_time = $8, resident = $9, "
             "history_length = $10, record = $11, position = CASE WHEN resident AND NOT $9 THEN "
             "nextval(pg_get_serial_sequence('sandboxer.sandboxes', 'position')) ELSE position "
             "END, claimed_by = CASE WHEN $13 THEN claimed_by "
             "END, claim_expires = CASE WHEN $13 THEN claim_expires END WHERE id = $1 AND "
             "history_length = $12",
             std::move(columns)},
            fmt::format("sandbox {} was changed by another writer meanwhile", record.id));
      }
      if (record.history.size() > before) {
        std::vector<HistoryEntry> added(record.history.begin() + static_cast<long>(before),
                                        record.history.end());
        out.add({"INSERT INTO sandboxer.history (sandbox_id, idx, event_id, entry) SELECT "
                 "$1, $2::int + t.n::int - 1, coalesce(t.e->>'event_id', ''), t.e FROM "
                 "json_array_elements($3::json) WITH ORDINALITY AS t(e, n)",
                 {record.id, std::to_string(before), to_json_text(added)}});
      }
      if (fresh ? !record.snapshots.empty() : snapshots != known->second.snapshots) {
        out.add({"DELETE FROM sandboxer.snapshots WHERE sandbox_id = $1", {record.id}});
        out.add({"INSERT INTO sandboxer.snapshots (sandbox_id, position, id, name, "
                 "snapshot) SELECT $1, t.n, t.e->>'id', coalesce(t.e->>'name', ''), t.e "
                 "FROM json_array_elements($2::json) WITH ORDINALITY AS t(e, n)",
                 {record.id, snapshots}});
      }
      if (fresh && record.idempotency_key && is_live(record.state)) {
        // Checked under the writers' lock (find_live_by_key): a key left by a closed record
        // passes to the new one.
        out.add({"INSERT INTO sandboxer.idempotency_keys (key, sandbox_id) VALUES ($1, $2) "
                 "ON CONFLICT (key) DO UPDATE SET sandbox_id = EXCLUDED.sandbox_id",
                 {*record.idempotency_key, record.id}});
      }
    }
    if (!closed.empty()) {
      auto statements = chain_closings(out.chain, m_data.ledger_id, "closed", closed);
      const std::size_t guard = guard_of(statements);
      for (std::size_t i = 0; i < statements.size(); ++i) {
        if (i == guard) {
          out.add_guard(std::move(statements[i]),
                        "the chain of closed records was moved by another writer meanwhile");
        } else {
          out.add(std::move(statements[i]));
        }
      }
    }
    return out;
  }

  const PgStore& m_store;
  LedgerData m_data;
  std::uint64_t m_seq_at_start = 0;
  ChainPosition m_chain; // where the chain of closed records is, under the writers' turn
  std::map<std::string, Known> m_known;
  std::set<std::string> m_claimed;
  std::vector<KeptEvent> m_events; // the outbox's rows, written by commit()
  bool m_open = false;
  bool m_adopted_id = false;
};

} // namespace

std::string row_json(const SandboxRecord& record) {
  SandboxRecord row;
  // Everything but the two lists, which have their tables.
  row = record;
  row.history.clear();
  row.snapshots.clear();
  std::string text;
  JsonWriter out(text);
  ledger_format::write_record(out, row);
  return text;
}

SandboxRecord record_from_row(const std::string& where, const std::string& row,
                              const std::optional<std::string>& history,
                              const std::optional<std::string>& snapshots, ReadScope scope) {
  SandboxRecord record;
  const char* part = "record";
  try {
    JsonReader in(row);
    ledger_format::read_record(in, record, scope);
    if (history) {
      part = "history";
      JsonReader entries(*history);
      ledger_format::read_value(entries, record.history, "history");
    }
    if (snapshots) {
      part = "snapshots";
      JsonReader snaps(*snapshots);
      ledger_format::read_value(snaps, record.snapshots, "snapshots");
    }
  } catch (const ledger_format::ShapeError& e) {
    throw LedgerError(fmt::format("ledger {}: sandbox {}: the {} read back is not a ledger "
                                  "record ({}); nothing was changed",
                                  where, record.id.empty() ? "?" : record.id, part, e.describe()));
  } catch (const ledger_format::SyntaxError& e) {
    throw LedgerError(fmt::format("ledger {}: sandbox {}: the {} read back is not JSON ({}); "
                                  "nothing was changed",
                                  where, record.id.empty() ? "?" : record.id, part, e.message));
  }
  return record;
}

namespace {

// Every session runs without JIT: the ledger's queries are short, and compiling a list of 10k
// records cost more (~95 ms) than the whole query without it. Set per session rather than as a
// startup option, which a pooler such as PgBouncer refuses.
constexpr std::string_view k_session_setup = "SET jit = off";

// Sets the first session up and reads the schema's version (0 when there is none yet), in one
// round trip.
int start_session(Connection& c) {
  try {
    auto rows = c.run_script(
        fmt::format("{}; SELECT version FROM sandboxer.schema_version", k_session_setup));
    return rows.values.empty() ? 0 : std::stoi(rows.values[0][0].value_or("0"));
  } catch (const PgError& e) {
    if (e.sqlstate() != "42P01" && e.sqlstate() != "3F000") { // no such table / schema
      throw;
    }
  }
  // A fresh database: the script was one implicit transaction, and its failed SELECT took the
  // SET with it.
  c.run_script(k_session_setup);
  return 0;
}

} // namespace

PgStore::PgStore(PgStoreOptions options)
    : m_options(std::move(options)), m_warm_for(std::this_thread::get_id()) {
  if (serving_as_keeper()) {
    return;
  }
  m_warm = std::async(std::launch::async, [this] {
    Warm warm;
    warm.connection = open_connection(connect_options());
    warm.connection->run_in_background(&m_abandon);
    warm.schema_version = start_session(*warm.connection);
    warm.connection->run_in_background(nullptr);
    return warm;
  });
}

PgStore::~PgStore() {
  m_abandon = true;
  if (m_warm.valid()) {
    m_warm.wait();
  }
}

std::string PgStore::process_name() const {
  return fmt::format("{} pid {}", m_options.host, ::getpid());
}

std::optional<std::string> PgStore::taken_elsewhere(const std::string& id,
                                                    const std::string& holder) const {
  auto rows =
      ready().query("SELECT resident FROM sandboxer.sandboxes WHERE id = $1 AND (NOT resident OR "
                    "(claimed_by <> $2 AND claim_expires >= now()))",
                    {id, holder});
  if (rows.values.empty()) {
    return std::nullopt;
  }
  return rows.values[0][0] == "t" ? "claimed by another reaper" : "closed by another process";
}

std::string PgStore::location() const {
  return m_options.url;
}

void PgStore::reset() const {
  std::lock_guard lock(m_mutex);
  m_connections.erase(std::this_thread::get_id());
}

ConnectOptions PgStore::connect_options() const {
  ConnectOptions connect;
  connect.url = m_options.url;
  connect.password = m_options.password;
  connect.application_name = "sandboxer " + process_name();
  connect.where = m_options.url;
  connect.state_dir = m_options.state_dir;
  connect.keeper_idle = m_options.keeper_idle;
  if (m_options.keeper_idle.count() > 0 && !serving_as_keeper()) {
    connect.keeper_socket = keeper_socket_path(m_options.state_dir, connect);
  }
  return connect;
}

void PgStore::keep_connections(std::chrono::seconds idle) const {
  ConnectOptions options = connect_options();
  options.application_name = fmt::format("sandboxer keeper {}", process_name());
  // One a command started finds its place made by that command, or leaves (its state directory
  // was removed meanwhile: it must not make it again).
  const bool started = std::getenv(k_started_keeper_variable) != nullptr;
  const auto socket = keeper_socket_path(m_options.state_dir, options, !started);
  if (started && socket.empty()) {
    spdlog::info("keeper: its place under {} is gone; not serving", m_options.state_dir.string());
    return;
  }
  // The connection this store made on its way up (the schema checked, made or migrated) serves
  // the first command.
  run_keeper(socket, options, idle, [&]() -> std::unique_ptr<LibpqConnection> {
    ready();
    std::lock_guard lock(m_mutex);
    auto made = m_connections.find(std::this_thread::get_id());
    if (made == m_connections.end()) {
      return nullptr;
    }
    std::unique_ptr<LibpqConnection> first(dynamic_cast<LibpqConnection*>(made->second.get()));
    if (first) {
      made->second.release();
      // Named as the keeper's other sessions in pg_stat_activity.
      first->query("SELECT set_config('application_name', $1, false)", {options.application_name});
    }
    m_connections.erase(made);
    return first;
  });
}

Connection& PgStore::connection() const {
  std::future<Warm> warm;
  {
    std::lock_guard lock(m_mutex);
    auto& slot = m_connections[std::this_thread::get_id()];
    if (slot) {
      return *slot; // stable: only this thread erases its own entry
    }
    if (std::this_thread::get_id() == m_warm_for && m_warm.valid()) {
      warm = std::move(m_warm);
    }
  }
  // Waited for outside the lock; a failure there is a failed connect, retried as one.
  std::unique_ptr<Connection> made;
  if (warm.valid()) {
    Warm ready = warm.get();
    made = std::move(ready.connection);
    std::lock_guard lock(m_mutex);
    m_warm_schema_version = ready.schema_version;
  } else {
    // Another thread's (a reap worker's) or a reconnect: the same setup, without the schema check
    // that the first session made.
    made = open_connection(connect_options());
    made->run_script(k_session_setup);
  }
  std::lock_guard lock(m_mutex);
  auto& slot = m_connections[std::this_thread::get_id()];
  slot = std::move(made);
  return *slot;
}

Connection& PgStore::ready() const {
  Connection& c = connection();
  if (!m_schema_checked) {
    // One round trip when the schema is current (made by the warm-up already, usually);
    // created or upgraded otherwise.
    std::optional<int> known;
    {
      std::lock_guard lock(m_mutex);
      known = std::exchange(m_warm_schema_version, std::nullopt);
    }
    const int version = known ? *known : start_session(c);
    if (version != k_schema_version) {
      spdlog::info("ledger {}: {}", location(), pg::migrate(c, process_name()));
    }
    m_schema_checked = true;
  }
  return c;
}

LedgerData PgStore::read(ReadScope scope) const {
  LedgerData data;
  scan(Records::resident, scope, [&](SandboxRecord& record) {
    data.sandboxes.push_back(std::move(record));
    return true;
  });
  auto meta =
      ready().query("SELECT ledger_id, event_seq, pruned_before FROM sandboxer.ledger_meta");
  if (!meta.values.empty()) {
    data.ledger_id = meta.values[0][0].value_or("");
    data.event_seq = std::stoull(meta.values[0][1].value_or("0"));
    if (const auto& pruned = meta.values[0][2]) {
      data.pruned_before = TimePoint(std::chrono::seconds(std::stoll(*pruned)));
    }
  }
  auto counts = ready().query(
      "SELECT state, count(*) FROM sandboxer.sandboxes WHERE NOT resident GROUP BY state");
  for (const auto& row : counts.values) {
    data.closed_counts[row[0].value_or("")] = std::stoull(row[1].value_or("0"));
  }
  return data;
}

void PgStore::scan(Records which, ReadScope scope,
                   const std::function<bool(SandboxRecord&)>& visit) const {
  const char* filter = which == Records::resident ? "WHERE s.resident"
                       : which == Records::closed ? "WHERE NOT s.resident"
                                                  : "";
  auto deadline = std::chrono::steady_clock::now() + m_options.lock_timeout;
  auto rows = with_reconnects(*this, deadline, [&] {
    // One part alone is read in the order of its partial index (no sort of the whole table).
    return ready().query(
        fmt::format("SELECT {} FROM sandboxer.sandboxes s {} ORDER BY {}s.position", columns(scope),
                    filter, which == Records::all ? "s.resident DESC, " : ""));
  });
  for (const auto& row : rows.values) {
    SandboxRecord record = decode(location(), row, scope);
    if (!visit(record)) {
      return;
    }
  }
}

std::optional<TimePoint>
PgStore::scan_window(TimePoint from, TimePoint to,
                     const std::function<bool(SandboxRecord&)>& visit) const {
  constexpr int k_page = 500;
  auto deadline = std::chrono::steady_clock::now() + m_options.lock_timeout;
  auto query = [&](const std::string& sql, const std::vector<Param>& params) {
    return with_reconnects(*this, deadline, [&] { return ready().query(sql, params); });
  };
  std::optional<TimePoint> pruned_before;
  auto meta = query("SELECT pruned_before FROM sandboxer.ledger_meta", {});
  if (!meta.values.empty() && meta.values[0][0]) {
    pruned_before = TimePoint(std::chrono::seconds(std::stoll(*meta.values[0][0])));
  }
  // Keyset pages, each served by a partial index: the resident records by position, then the
  // closed ones by last_time from `from` on (sandboxes_closed), so that records closed before
  // the window are never read. A record that closes between the two passes was seen resident
  // and is skipped among the closed.
  std::set<std::string> resident;
  auto pages = [&](const std::string& sql, auto params_after, auto&& keep) {
    std::string position = "0";
    std::string last_time = unix_seconds(from);
    while (true) {
      auto rows = query(sql, params_after(last_time, position));
      for (const auto& row : rows.values) {
        position = row.at(5).value_or("0");
        last_time = row.at(6).value_or(last_time);
        SandboxRecord record = decode(location(), row, ReadScope::whole);
        if (keep(record) && may_overlap(record, from, to) && !visit(record)) {
          return false;
        }
      }
      if (rows.values.size() < static_cast<size_t>(k_page)) {
        return true;
      }
    }
  };
  const std::string select = fmt::format(
      "SELECT {}, s.position, s.last_time FROM sandboxer.sandboxes s ", k_whole_columns);
  const bool more = pages(
      select + fmt::format("WHERE s.resident AND s.created_at < $1 AND s.position > $2 ORDER BY "
                           "s.position LIMIT {}",
                           k_page),
      [&](const std::string&, const std::string& position) {
        return std::vector<Param>{unix_seconds(to), position};
      },
      [&](const SandboxRecord& record) {
        resident.insert(record.id);
        return true;
      });
  if (more) {
    // `s.last_time >= $2` bounds the index range; the row comparison orders the ties.
    pages(
        select + fmt::format("WHERE NOT s.resident AND s.created_at < $1 AND s.last_time >= $2 "
                             "AND (s.last_time, s.position) > ($2, $3) ORDER BY s.last_time, "
                             "s.position LIMIT {}",
                             k_page),
        [&](const std::string& last_time, const std::string& position) {
          return std::vector<Param>{unix_seconds(to), last_time, position};
        },
        [&](const SandboxRecord& record) { return !resident.contains(record.id); });
  }
  return pruned_before;
}

std::optional<SandboxRecord> PgStore::find(const std::string& id_or_name) const {
  auto deadline = std::chrono::steady_clock::now() + m_options.lock_timeout;
  auto rows = with_reconnects(*this, deadline, [&] {
    return ready().query(fmt::format("SELECT {}{}", k_whole_columns, k_find_order), {id_or_name});
  });
  if (rows.values.empty()) {
    return std::nullopt;
  }
  return decode(location(), rows.values[0], ReadScope::whole);
}

std::unique_ptr<LedgerStore::Transaction> PgStore::begin() const {
  return std::make_unique<PgTransaction>(*this);
}

PruneReport PgStore::prune(TimePoint cutoff, bool dry_run) const {
  PruneReport report;
  std::unique_ptr<Transaction> tx; // the writers' turn, so that no commit races the deletion
  if (!dry_run) {
    tx = begin();
  }
  auto rows = ready().query(fmt::format("SELECT {} FROM sandboxer.sandboxes s WHERE NOT "
                                        "s.resident AND s.last_time < $1 ORDER BY s.position",
                                        k_summary_columns),
                            {unix_seconds(cutoff)});
  for (const auto& row : rows.values) {
    report.records.push_back(decode(location(), row, ReadScope::summary));
  }
  report.units = report.records.size();
  if (!dry_run && !report.records.empty()) {
    // Each pruning goes on the chain of closed records, so that a record missing from it later
    // is known to be pruned, not deleted.
    auto gone = ready().query("SELECT id, record FROM sandboxer.sandboxes WHERE NOT resident AND "
                              "last_time < $1 ORDER BY position",
                              {unix_seconds(cutoff)});
    std::vector<ClosedRow> pruned;
    for (const auto& row : gone.values) {
      pruned.push_back({row[0].value_or(""), row[1].value_or("")});
    }
    const LedgerHead head = chain_head(ready());
    ChainPosition chain{head.head.hash, head.head.lines};
    auto statements = chain_closings(chain, head.ledger_id, "pruned", pruned);
    const std::size_t guard = guard_of(statements);
    // GREATEST skips a NULL: the first prune sets it.
    statements.push_back(
        {"UPDATE sandboxer.ledger_meta SET pruned_before = GREATEST(pruned_before, "
         "(SELECT max(last_time) FROM sandboxer.sandboxes WHERE NOT resident AND "
         "last_time < $1))",
         {unix_seconds(cutoff)}});
    statements.push_back({"DELETE FROM sandboxer.sandboxes WHERE NOT resident AND last_time < $1",
                          {unix_seconds(cutoff)}});
    auto results = ready().pipeline(statements);
    if (results.at(guard).affected != 1) {
      throw LedgerError(fmt::format("ledger {}: the chain of closed records moved during a prune; "
                                    "nothing was pruned",
                                    location()));
    }
  }
  if (tx) {
    tx->commit();
  }
  return report;
}

VerifyReport PgStore::verify(const std::optional<ChainHead>& kept) const {
  VerifyReport report;
  try {
    scan(Records::all, ReadScope::whole, [&](SandboxRecord& record) {
      check_chain(report, record, fmt::format("{} sandboxes row {}", location(), record.id));
      return true;
    });
    check_closings(ready(), location(), report, kept);
  } catch (const Error& e) {
    report.problems.push_back({"", -1, location(), e.what()});
  }
  return report;
}

bool PgStore::exists() const {
  return schema_version(connection()) > 0;
}

LedgerHead PgStore::head() const {
  return chain_head(ready());
}

std::string PgStore::migrate() const {
  std::string done = pg::migrate(connection(), process_name());
  m_schema_checked = true;
  return fmt::format("ledger {}: {}", location(), done);
}

std::string PgStore::describe() const {
  auto rows = ready().query("SELECT (SELECT version FROM sandboxer.schema_version), "
                            "(SELECT count(*) FROM sandboxer.sandboxes WHERE resident), "
                            "(SELECT count(*) FROM sandboxer.sandboxes), "
                            "current_setting('server_version')");
  const auto& r = rows.values.at(0);
  const bool kept = dynamic_cast<const KeptConnection*>(&ready()) != nullptr;
  return fmt::format("postgresql ledger {}: schema version {}, {} records ({} resident), "
                     "PostgreSQL {}, {}",
                     location(), r[0].value_or("?"), r[2].value_or("0"), r[1].value_or("0"),
                     r[3].value_or("?"),
                     kept ? "through this machine's connection keeper" : "connected directly");
}

} // namespace sandboxer::ledger::pg
