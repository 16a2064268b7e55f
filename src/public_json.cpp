// The public JSON of records and snapshots (docs/json-output.md), written straight into a string:
// `list -o json` over a large ledger prints thousands of records, and building a nlohmann
// document per record cost more than reading the whole ledger. Keys come in sorted order, as
// nlohmann's dump() writes them, so that every command prints a record the same way.

#include <nlohmann/json.hpp>

#include <sandboxer/public_json.hpp>

#include "src/json/writer.hpp"

namespace sandboxer {
namespace {

using json_text::JsonWriter;

// The members of one object: writes the separators and the keys.
class Members {
public:
  explicit Members(JsonWriter& out) : m_out(out) { m_out.raw("{"); }
  ~Members() { m_out.raw("}"); }
  Members(const Members&) = delete;
  Members& operator=(const Members&) = delete;

  JsonWriter& key(std::string_view name) {
    m_out.raw(m_first ? "\"" : ",\"");
    m_first = false;
    m_out.raw(name); // keys are our own literals: nothing to escape
    m_out.raw("\":");
    return m_out;
  }

private:
  JsonWriter& m_out;
  bool m_first = true;
};

void write_snapshot(JsonWriter& out, const SandboxRecord& owner, const SnapshotRecord& snapshot) {
  Members m(out);
  m.key("backend_ref").string(snapshot.backend_ref);
  m.key("created_at").time(snapshot.created_at);
  m.key("driver").string(owner.driver);
  m.key("id").string(snapshot.id);
  m.key("name").string(snapshot.name);
  m.key("sandbox").string(owner.id);
  if (snapshot.size_bytes) {
    m.key("size_bytes").integer(*snapshot.size_bytes);
  } else {
    m.key("size_bytes").raw("null");
  }
}

void write_history(JsonWriter& out, const std::vector<HistoryEntry>& history) {
  out.raw("[");
  for (size_t i = 0; i < history.size(); ++i) {
    const HistoryEntry& entry = history[i];
    if (i > 0) {
      out.raw(",");
    }
    Members m(out);
    m.key("actor").string(entry.actor);
    m.key("details").any(entry.details);
    if (!entry.event.empty()) {
      m.key("event").string(entry.event);
      m.key("event_id").string(entry.event_id);
    }
    if (entry.from) {
      m.key("from").string(to_string(*entry.from));
    } else {
      m.key("from").raw("null");
    }
    m.key("reason").string(entry.reason);
    m.key("time").time(entry.time);
    m.key("to").string(to_string(entry.to));
  }
  out.raw("]");
}

void write_record(JsonWriter& out, const SandboxRecord& r, TimePoint now, bool with_history) {
  Members m(out);
  m.key("backend_id").string(r.backend_id);
  m.key("created_at").time(r.created_at);
  m.key("driver").string(r.driver);
  m.key("error").optional_string(r.error);
  m.key("expires_at").optional_time(r.expires_at);
  if (with_history) {
    write_history(m.key("history"), r.history);
  }
  m.key("id").string(r.id);
  m.key("idempotency_key").optional_string(r.idempotency_key);
  m.key("labels").string_map(r.labels);
  m.key("max_expires_at").optional_time(r.max_expires_at);
  m.key("name").string(r.name);
  {
    Members owner(m.key("owner"));
    owner.key("ci").string_map(r.owner.ci);
    owner.key("host").string(r.owner.host);
    owner.key("pid").integer(r.owner.pid);
    owner.key("user").string(r.owner.user);
  }
  {
    Members profile(m.key("profile"));
    profile.key("hash").string(r.profile.hash);
    profile.key("name").string(r.profile.name);
    profile.key("path").string(r.profile.path);
  }
  m.key("restored_from").optional_string(r.restored_from);
  if (r.expires_at) {
    m.key("seconds_left").integer((*r.expires_at - now).count());
  } else {
    m.key("seconds_left").raw("null");
  }
  JsonWriter& snapshots = m.key("snapshots");
  snapshots.raw("[");
  for (size_t i = 0; i < r.snapshots.size(); ++i) {
    if (i > 0) {
      snapshots.raw(",");
    }
    write_snapshot(snapshots, r, r.snapshots[i]);
  }
  snapshots.raw("]");
  m.key("state").string(to_string(r.state));
}

} // namespace

void write_public_json(std::string& out, const SandboxRecord& record, TimePoint now,
                       bool with_history) {
  JsonWriter writer(out);
  write_record(writer, record, now, with_history);
}

nlohmann::json public_json(const SandboxRecord& record, TimePoint now, bool with_history) {
  std::string text;
  write_public_json(text, record, now, with_history);
  return nlohmann::json::parse(text);
}

nlohmann::json snapshot_json(const SandboxRecord& owner, const SnapshotRecord& snapshot) {
  std::string text;
  JsonWriter writer(text);
  write_snapshot(writer, owner, snapshot);
  return nlohmann::json::parse(text);
}

} // namespace sandboxer
