#pragma once

#include <chrono>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <sandboxer/http.hpp>

#include "core/events/hook.hpp"
#include "core/ledger/ledger.hpp"

// Lifecycle events (docs/events.md): one CloudEvents 1.0 event per history entry, written to an
// outbox under the state directory in the same critical section as the ledger change, and
// delivered from there to every sink, at least once.
namespace sandboxer::events {

// The CloudEvents 1.0 structured-mode JSON of a committed history entry (its event and event_id
// set), with the record's public fields as data.
// Every event's type is this prefix and the history entry's event name ("exec.started"): one
// place, so that `events list` and `events list --pending` name events alike (issue 35).
inline constexpr std::string_view k_event_type_prefix = "dev.sandboxer.sandbox.";
// "dev.sandboxer.sandbox.exec.started" -> "exec.started"; another type is left whole.
inline std::string short_event_type(std::string_view type) {
  return std::string(type.starts_with(k_event_type_prefix) ? type.substr(k_event_type_prefix.size())
                                                           : type);
}

nlohmann::json cloud_event(const SandboxRecord& record, size_t index, const std::string& ledger_id,
                           std::uint64_t sequence);

// A sink's identity in the outbox: its type and a hash of its whole definition, so that two
// profiles naming the same file share one cursor, and a changed definition starts afresh.
std::string sink_key(const nlohmann::json& sink);

// Whether a sink reaches the same place from any machine (http). The others (a jsonl file, an
// exec hook, stderr, a descriptor) are the machine's own: on a shared ledger their events are
// bound to the machine that made them ("host" in the outbox's copy of the definition).
bool reachable_from_any_machine(const nlohmann::json& sink);

// The directory of pending events: <state dir>/outbox.
//
//   <seq>-<event id>.prepared  written (fsync'd) under the ledger lock before the commit
//   <seq>-<event id>.json      renamed from .prepared once the ledger holds the change
//   sinks/<key>.cursor         the last sequence number delivered to that sink
//   sinks/<key>.lock           held while a process delivers to that sink
//
// A .prepared file left by a killed process is settled by the next process that holds the
// ledger lock: kept (renamed) if the ledger has its event id, removed if not.
//
// A store that keeps an outbox of its own (the fleet's PostgreSQL ledger, KeptEvents) gets the
// events instead, committed in the same transaction as the change: nothing to prepare or settle,
// and any machine of the fleet delivers them.
class Outbox {
public:
  // `ledger` finds the records a killed process's commit closed, when settling its leftovers.
  explicit Outbox(std::filesystem::path state_dir, const Ledger* ledger = nullptr);

  const std::filesystem::path& dir() const { return m_dir; }

  // Under the ledger lock, before `tx` is committed: settles leftovers, gives each history
  // entry of `record` from `first` on its event id, and writes the events of those
  // that have sinks (`global_sinks` plus the ones the record's profile named at create).
  void stage(LedgerStore::Transaction& tx, SandboxRecord& record, size_t first,
             const nlohmann::json& global_sinks);
  // After the commit, still under the lock: what stage() wrote becomes deliverable.
  void committed();
  // Under the ledger lock: settles .prepared files of killed processes.
  void settle_leftovers(LedgerStore::Transaction& tx);

  struct Entry {
    std::filesystem::path file;
    std::uint64_t sequence = 0;
    bool prepared = false;                  // not known to be committed yet
    nlohmann::json event;                   // the CloudEvent
    nlohmann::json sinks;                   // {key: definition} of the sinks it goes to
    std::vector<std::string> pending_sinks; // keys whose cursor is behind it
  };
  // Whether a .prepared file is there (names only; nothing is parsed).
  bool has_prepared() const;
  // Every event still in the outbox, in sequence order.
  std::vector<Entry> entries() const;
  // The last sequence number delivered to sink `key` (0: none).
  std::uint64_t cursor(const std::string& key) const;
  // Removes events that every sink of theirs has.
  void remove(const std::vector<const Entry*>& delivered) const;
  // The turn to deliver to sink `key`: one deliverer per sink across processes (and machines,
  // for a store's outbox), so that its cursor only moves forward and the receiver sees each
  // sandbox's events in order. Null when another holds it; given back when destroyed.
  // `longest` bounds how long the holder's next send may take: on a store's outbox the turn is a
  // lease that long (and a margin), renewed as the holder goes, so that one that died loses it
  // soon.
  class SinkTurn {
  public:
    virtual ~SinkTurn() = default;
    // Keeps the turn for `longest` more; false when it passed to another meanwhile.
    virtual bool renew(std::chrono::milliseconds longest) = 0;
    // The sink has every event up to `sequence`: moves its cursor and keeps the turn for the
    // next send, `longest`; false (the cursor not moved) when the turn passed to another.
    virtual bool advance(std::uint64_t sequence, std::chrono::milliseconds longest) = 0;
  };
  std::unique_ptr<SinkTurn> take_sink(const std::string& key,
                                      std::chrono::milliseconds longest) const;
  // Where the events wait, for messages: the directory or the ledger.
  std::string where() const;
  // Whether this machine may send to `sink` (one bound to another machine waits for that one).
  bool sendable_here(const nlohmann::json& sink) const;

private:
  bool in_closed_record(const std::filesystem::path& file, const std::string& event_id) const;
  void warn_of_local_leftovers() const;
  std::filesystem::path m_dir;
  const Ledger* m_ledger;
  const KeptEvents* m_kept; // the store's own outbox, or null
  std::string m_host;       // with m_kept: the machine that machine-bound sinks are bound to
  std::mutex m_mutex;       // reap's workers share one Engine
  std::vector<std::filesystem::path> m_staged;
};

// How one delivery pass may behave.
struct DeliveryPolicy {
  // Time this process may spend delivering, across all passes. Lifecycle commands get a short
  // one (the hub must not slow them down); `events flush` a long one.
  std::chrono::milliseconds budget{2000};
  // Whether a failed send is retried (with backoff, jitter and Retry-After) within the budget.
  // Lifecycle commands try each sink once per pass and leave the rest to the next command.
  bool retry = false;
};

struct DeliveryCounts {
  std::uint64_t delivered = 0; // (event, sink) pairs sent
  std::uint64_t failed = 0;    // send attempts that failed
  std::uint64_t pending = 0;   // events left in the outbox after the pass, for sinks of here
  std::uint64_t elsewhere = 0; // events left only for sinks bound to other machines
};

// Sends what is in the outbox to its sinks, in sequence order per sink, and removes each event
// once every sink of it has it. Never throws: a sink that fails keeps its events for later.
class Delivery {
public:
  Delivery(const Outbox& outbox, DeliveryPolicy policy);
  // One pass; returns at once when the budget is spent or another thread is delivering.
  DeliveryCounts deliver();
  const DeliveryCounts& totals() const { return m_totals; }

private:
  bool out_of_time() const;
  std::chrono::milliseconds time_left() const;
  bool deliver_to(const std::string& key, const nlohmann::json& sink,
                  std::vector<Outbox::Entry>& entries);

  const Outbox& m_outbox;
  DeliveryPolicy m_policy;
  std::chrono::steady_clock::duration m_spent{};
  std::chrono::steady_clock::time_point m_pass_started;
  std::mutex m_mutex;
  std::vector<std::string> m_failed_sinks; // given up on in this process (no retry)
  // What is left of the time a lifecycle command waits, in all, for turns other processes hold
  // on its sinks: they are sending, and what they do not take waits for the next command.
  std::chrono::milliseconds m_turn_wait_left{500};
  DeliveryCounts m_totals;
};

// The EventHook of every command: stages into the outbox under the ledger lock, and delivers
// within the policy's budget when the Engine is outside it.
class Publisher : public EventHook {
public:
  Publisher(const Ledger& ledger, nlohmann::json global_sinks, DeliveryPolicy policy);
  void stage(LedgerStore::Transaction& tx, SandboxRecord& record, size_t first_new) override;
  void committed() override;
  void deliver() override;
  // deliver(), returning what the pass did.
  DeliveryCounts delivery_pass() { return m_delivery.deliver(); }
  // Settles what killed processes left (taking the ledger lock only if there is something to
  // settle), then delivers.
  DeliveryCounts flush();
  const Outbox& outbox() const { return m_outbox; }
  const Delivery& delivery() const { return m_delivery; }

private:
  const Ledger& m_ledger;
  nlohmann::json m_global_sinks;
  Outbox m_outbox;
  Delivery m_delivery;
};

// --- sinks (core/events/sinks.cpp) ---

// The outcome of sending one event to one sink.
struct SendResult {
  bool ok = false;
  std::string error;                                    // why not, for the log (never a secret)
  std::optional<std::chrono::milliseconds> retry_after; // what the receiver asked for
  bool retryable = true;
};

// What an HTTP receiver asked to wait (Retry-After, else RateLimit-Reset) in seconds, at most a
// day; nothing for an HTTP date or anything but digits.
std::optional<std::chrono::milliseconds> retry_after_of(const http::Response& response);

// Sends `event_text` (one JSON line, no newline) to `sink` within `timeout`.
SendResult send(const nlohmann::json& sink, const std::string& event_text,
                std::chrono::milliseconds timeout);

// A sink's per-send timeout (`timeout`, default 5s; 10s for exec) and retry count (`retries`,
// default 5, used by `events flush`).
std::chrono::milliseconds timeout_of(const nlohmann::json& sink);
int retries_of(const nlohmann::json& sink);

// What a sink definition says, checked: "jsonl /path/events.jsonl", "http https://hub/...".
std::string describe_sink(const nlohmann::json& sink);

} // namespace sandboxer::events
