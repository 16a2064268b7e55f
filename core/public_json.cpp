// The public JSON of records and snapshots (docs/json-output.md), written straight into a string:
// `list -o json` over a large ledger prints thousands of records, and building a nlohmann
// document per record cost more than reading the whole ledger. Keys come in sorted order, as
// nlohmann's dump() writes them, so that every command prints a record the same way.

#include "core/public_json.hpp"

#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/ledger/fields.hpp"

namespace sandboxer {
namespace {

using ledger_format::Field;
using ledger_format::Fields;
using ledger_format::JsonWriter;

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

// A struct's public fields (fields.hpp) in name order, with `extra` members merged in.
template <typename Struct>
void write_sorted(
    JsonWriter& out, const Struct& value,
    std::vector<std::pair<std::string_view, std::function<void(JsonWriter&)>>> extra = {}) {
  for (const auto& f : Fields<Struct>::fields) {
    if (!(f.flags & ledger_format::k_private)) {
      extra.emplace_back(f.name, [&value, write = f.write](JsonWriter& w) { write(w, value); });
    }
  }
  std::sort(extra.begin(), extra.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  Members m(out);
  for (const auto& [name, write] : extra) {
    write(m.key(name));
  }
}

void write_snapshot(JsonWriter& out, const SandboxRecord& owner, const SnapshotRecord& snapshot) {
  write_sorted(out, snapshot,
               {{"driver", [&](JsonWriter& w) { w.string(owner.driver); }},
                {"sandbox", [&](JsonWriter& w) { w.string(owner.id); }}});
}

template <typename T, typename Write>
void write_list(JsonWriter& out, const std::vector<T>& items, Write write) {
  out.raw("[");
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) {
      out.raw(",");
    }
    write(out, items[i]);
  }
  out.raw("]");
}

// The record's public members in name order, computed once: the record's own public fields, the
// nested ones written sorted, and the computed `seconds_left`.
enum class Member { field, owner, profile, snapshots, history, seconds_left };
struct Slot {
  std::string_view name;
  Member member;
  const Field<SandboxRecord>* field = nullptr;
};

const std::vector<Slot>& record_slots() {
  static const std::vector<Slot> slots = [] {
    std::vector<Slot> list = {{"owner", Member::owner},
                              {"profile", Member::profile},
                              {"snapshots", Member::snapshots},
                              {"history", Member::history},
                              {"seconds_left", Member::seconds_left}};
    for (const auto& f : Fields<SandboxRecord>::fields) {
      const bool listed =
          std::any_of(list.begin(), list.end(), [&](const Slot& s) { return s.name == f.name; });
      if (!(f.flags & ledger_format::k_private) && !listed) {
        list.push_back({f.name, Member::field, &f});
      }
    }
    std::sort(list.begin(), list.end(),
              [](const Slot& a, const Slot& b) { return a.name < b.name; });
    return list;
  }();
  return slots;
}

void write_record(JsonWriter& out, const SandboxRecord& r, TimePoint now, bool with_history) {
  Members m(out);
  for (const Slot& slot : record_slots()) {
    switch (slot.member) {
    case Member::field:
      // A member the format writes only when it holds something (a lease) is left out likewise.
      if (!((slot.field->flags & ledger_format::k_nonempty) &&
            !(slot.field->flags & ledger_format::k_listed) && slot.field->empty(r))) {
        slot.field->write(m.key(slot.name), r);
      }
      break;
    case Member::owner:
      write_sorted(m.key(slot.name), r.owner);
      break;
    case Member::profile:
      write_sorted(m.key(slot.name), r.profile);
      break;
    case Member::snapshots:
      write_list(m.key(slot.name), r.snapshots,
                 [&](JsonWriter& o, const SnapshotRecord& s) { write_snapshot(o, r, s); });
      break;
    case Member::history:
      if (with_history) {
        write_list(m.key(slot.name), r.history,
                   [](JsonWriter& o, const HistoryEntry& e) { write_sorted(o, e); });
      }
      break;
    case Member::seconds_left:
      if (r.expires_at) {
        m.key(slot.name).integer((*r.expires_at - now).count());
      } else {
        m.key(slot.name).raw("null");
      }
      break;
    }
  }
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
