// The rules of a record: its states, event kinds, transitions, lookups and ids.
#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <sys/random.h>
#include <utility>

#include <sandboxer/error.hpp>

#include "core/errors.hpp"
#include "core/ledger/document.hpp"
#include "core/ledger/ledger_store.hpp"

namespace sandboxer {
namespace {

using json = nlohmann::json;

constexpr std::array<std::string_view, 12> k_state_names = {
    "creating", "running",  "snapshotting", "destroying", "destroyed", "failed",
    "expired",  "orphaned", "paused",       "pausing",    "resuming",  "pooled",
};

// In EventKind's order.
constexpr std::array<std::string_view, 34> k_event_names = {
    "created",          "ready",
    "restoring",        "restored",
    "restore.failed",   "exec.started",
    "exec.finished",    "snapshotting",
    "snapshotted",      "snapshot.failed",
    "snapshot.removed", "extended",
    "expiring",         "expired",
    "destroying",       "destroyed",
    "destroy.failed",   "failed",
    "orphan.found",     "repaired",
    "updated",          "files.copied",
    "lease.ended",      "ports.exposed",
    "ports.forwarded",  "ports.forward_ended",
    "pausing",          "paused",
    "pause.failed",     "resuming",
    "resumed",          "resume.failed",
    "pooled",           "claimed",
};

template <typename Enum, size_t N>
std::optional<Enum> from_name(const std::array<std::string_view, N>& names, std::string_view text) {
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == text) {
      return static_cast<Enum>(i);
    }
  }
  return std::nullopt;
}

// 12 characters of RFC 4648 base32 (lowercase) = 60 random bits: collisions stay negligible for
// any ledger size a machine can hold, and the id is still short enough to type.
std::string new_id(std::string_view prefix) {
  static constexpr char k_alphabet[] = "abcdefghijklmnopqrstuvwxyz234567";
  std::uint64_t bits = 0;
  auto* out = reinterpret_cast<unsigned char*>(&bits);
  size_t filled = 0;
  while (filled < sizeof(bits)) {
    const ssize_t got = ::getrandom(out + filled, sizeof(bits) - filled, 0);
    if (got < 0) {
      if (errno == EINTR) {
        continue;
      }
      throw Error(ExitCode::runtime,
                  fmt::format("cannot read random bytes for an id: {}", std::strerror(errno)));
    }
    filled += static_cast<size_t>(got);
  }
  std::string id(prefix);
  for (int i = 0; i < 12; ++i) {
    id += k_alphabet[bits & 31];
    bits >>= 5;
  }
  return id;
}

} // namespace

const char* to_string(State state) {
  const auto index = static_cast<size_t>(state);
  return index < k_state_names.size() ? k_state_names[index].data() : "unknown";
}

std::optional<State> state_from_string(std::string_view text) {
  return from_name<State>(k_state_names, text);
}

const char* to_string(EventKind kind) {
  const auto index = static_cast<size_t>(kind);
  return index < k_event_names.size() ? k_event_names[index].data() : "updated";
}

std::optional<EventKind> event_kind_from_string(std::string_view text) {
  return from_name<EventKind>(k_event_names, text);
}

bool is_transitional(State state) {
  return state == State::creating || state == State::snapshotting || state == State::destroying ||
         state == State::expired || state == State::pausing || state == State::resuming;
}

bool is_live(State state) {
  return state != State::destroyed && state != State::failed;
}

std::optional<TimePoint> ttl_deadline(const SandboxRecord& record) {
  return record.lease ? record.lease->ttl_expires_at : record.expires_at;
}

TimePoint lease_deadline(const Lease& lease, TimePoint now) {
  TimePoint deadline = now + lease.duration.value_or(Seconds(0));
  return lease.ttl_expires_at ? std::min(deadline, *lease.ttl_expires_at) : deadline;
}

bool paused_without_resource(const SandboxRecord& record) {
  return record.state == State::paused && record.pause && record.pause->emulated;
}

std::string deadline_reason(const SandboxRecord& record) {
  const std::string at = record.expires_at ? format_time(*record.expires_at) : "-";
  if (record.lease) {
    return fmt::format("lease of {} lapsed at {} (renewed {} time(s))", record.lease->holder, at,
                       record.lease->renewals);
  }
  return "ttl expired at " + at;
}

json lease_summary(const Lease& lease, TimePoint now, const std::string& how) {
  return {{"lease",
           {{"holder", lease.holder},
            {"duration", format_duration(lease.duration.value_or(Seconds(0)))},
            {"acquired_at", format_time(lease.acquired_at)},
            {"last_renewed_at", format_time(lease.renewed_at)},
            {"renewals", lease.renewals},
            {"ended_at", format_time(now)},
            {"how", how}}}};
}

bool is_resident(const SandboxRecord& record) {
  return is_live(record.state) || !record.snapshots.empty();
}

TimePoint last_entry_time(const SandboxRecord& record) {
  return record.history.empty() ? record.created_at : record.history.back().time;
}

bool may_overlap(const SandboxRecord& record, TimePoint from, TimePoint to) {
  return record.created_at < to && (is_live(record.state) || last_entry_time(record) >= from);
}

void SandboxRecord::transition(EventKind event, State to, TimePoint time, std::string actor,
                               std::string reason, json details) {
  HistoryEntry entry;
  entry.time = time;
  entry.from = history.empty() ? std::nullopt : std::optional(state);
  entry.to = to;
  entry.actor = std::move(actor);
  entry.reason = std::move(reason);
  entry.details = std::move(details);
  entry.event = event;
  history.push_back(std::move(entry));
  state = to;
}

void write_json(std::string& out, const SandboxRecord& r) {
  ledger_format::JsonWriter writer(out);
  ledger_format::write_record(writer, r);
}

// Both conversions go through the ledger's own writer and reader, so that a value converts
// exactly as the file stores it.
void to_json(json& j, const SandboxRecord& r) {
  std::string text;
  write_json(text, r);
  j = json::parse(text);
}

void from_json(const json& j, SandboxRecord& r) {
  r = SandboxRecord();
  const std::string text = j.dump(-1, ' ', false, json::error_handler_t::replace);
  try {
    ledger_format::read_journal_line(text, r, ReadScope::whole);
  } catch (const ledger_format::ShapeError& e) {
    std::string label = r.id;
    if (label.empty() && j.is_object()) {
      if (auto it = j.find("id"); it != j.end() && it->is_string()) {
        label = it->get<std::string>();
      }
    }
    throw LedgerError(fmt::format("sandbox record {}: {}", label.empty() ? "without an id" : label,
                                  e.describe()));
  } catch (const ledger_format::SyntaxError& e) {
    throw LedgerError(
        fmt::format("sandbox record: invalid JSON at byte offset {}: {}", e.offset, e.message));
  }
}

SandboxRecord* LedgerData::find(const std::string& id_or_name) {
  return const_cast<SandboxRecord*>(std::as_const(*this).find(id_or_name));
}

const SandboxRecord* LedgerData::find(const std::string& id_or_name) const {
  for (const auto& record : sandboxes) {
    if (record.id == id_or_name) {
      return &record;
    }
  }
  // Names are reused once a sandbox is gone: a name answers with its live record, else with the
  // newest record that bore it, so `history NAME` and a second `destroy NAME` still reach it.
  const SandboxRecord* newest = nullptr;
  for (const auto& record : sandboxes) {
    if (record.name != id_or_name) {
      continue;
    }
    if (is_live(record.state)) {
      return &record;
    }
    if (!newest || record.created_at >= newest->created_at) {
      newest = &record;
    }
  }
  return newest;
}

std::string new_sandbox_id() {
  return new_id("sbx-");
}
std::string new_snapshot_id() {
  return new_id("snp-");
}
std::string new_pause_id() {
  return new_id("pse-");
}
std::string new_ledger_id() {
  return new_id("ldg-");
}
std::string new_event_id() {
  // Two draws: 120 bits, unique across every ledger a hub may hear from.
  return new_id("evt-") + new_id("");
}

const SnapshotRecord* snapshot_of(const SandboxRecord& record, const std::string& ref) {
  auto colon = ref.find(':');
  bool owner_matches = colon != std::string::npos &&
                       (record.id == ref.substr(0, colon) || record.name == ref.substr(0, colon));
  for (const auto& snap : record.snapshots) {
    if (colon == std::string::npos ? snap.id == ref
                                   : owner_matches && snap.name == ref.substr(colon + 1)) {
      return &snap;
    }
  }
  return nullptr;
}

} // namespace sandboxer
