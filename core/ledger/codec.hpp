#pragma once
// How each value of a record is read from and written to the ledger's JSON text, and the one list
// of every record's fields (fields.hpp) that the reader, the writer and the public JSON walk.

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/ledger/record.hpp"
#include "sdk/json/reader.hpp"
#include "sdk/json/writer.hpp"

namespace sandboxer::ledger_format {

using json_text::JsonReader;
using json_text::JsonWriter;
using json_text::SyntaxError;
using Kind = JsonReader::Kind;

// A well-formed value of the wrong shape. The readers name the field; the callers add which
// record and which file.
struct ShapeError {
  std::string field; // "owner.pid", "history[2].to"; empty for the value itself
  std::string problem;

  std::string describe() const;
  // Adds the enclosing field: "history[2]" + "to" -> "history[2].to".
  void nest(std::string_view outer);
};

void expect(JsonReader& in, Kind kind, std::string_view field, std::string_view expected);
std::int64_t read_integer(JsonReader& in, std::string_view field, std::int64_t min,
                          std::int64_t max, std::string_view expected);

// Leaf values.
void read_value(JsonReader& in, std::string& out, std::string_view field);
void read_value(JsonReader& in, std::optional<std::string>& out, std::string_view field);
void read_value(JsonReader& in, TimePoint& out, std::string_view field);
void read_value(JsonReader& in, std::optional<TimePoint>& out, std::string_view field);
void read_value(JsonReader& in, State& out, std::string_view field);
void read_value(JsonReader& in, std::optional<State>& out, std::string_view field);
void read_value(JsonReader& in, EventKind& out, std::string_view field);
void read_value(JsonReader& in, int& out, std::string_view field);
void read_value(JsonReader& in, bool& out, std::string_view field);
void read_value(JsonReader& in, std::optional<bool>& out, std::string_view field);
void read_value(JsonReader& in, std::optional<std::uint64_t>& out, std::string_view field);
void read_value(JsonReader& in, std::optional<int>& out, std::string_view field);
void read_value(JsonReader& in, std::optional<Seconds>& out, std::string_view field);
void read_value(JsonReader& in, std::map<std::string, std::string>& out, std::string_view field);
void read_value(JsonReader& in, nlohmann::json& out, std::string_view field);

void write_value(JsonWriter& out, const std::string& value);
void write_value(JsonWriter& out, const std::optional<std::string>& value);
void write_value(JsonWriter& out, const TimePoint& value);
void write_value(JsonWriter& out, const std::optional<TimePoint>& value);
void write_value(JsonWriter& out, const State& value);
void write_value(JsonWriter& out, const std::optional<State>& value);
void write_value(JsonWriter& out, const EventKind& value);
void write_value(JsonWriter& out, const int& value);
void write_value(JsonWriter& out, const bool& value);
void write_value(JsonWriter& out, const std::optional<bool>& value);
void write_value(JsonWriter& out, const std::optional<std::uint64_t>& value);
void write_value(JsonWriter& out, const std::optional<int>& value);
void write_value(JsonWriter& out, const std::optional<Seconds>& value);
void write_value(JsonWriter& out, const std::map<std::string, std::string>& value);
void write_value(JsonWriter& out, const nlohmann::json& value);

// Values with a closed set of words (docs/ledger-format.md): anything else is refused naming the
// field, as an unknown state is.
void read_pause_cause(JsonReader& in, std::string& out, std::string_view field); // user, idle
void read_on_paused_max(JsonReader& in, std::string& out, std::string_view field);
void read_on_idle(JsonReader& in, std::string& out, std::string_view field);
// policy.cost: the profile's `cost` object, or null.
void read_cost(JsonReader& in, nlohmann::json& out, std::string_view field);

// Structs with a field list (fields.hpp) and arrays, defined below.
template <typename Struct> struct Fields;
template <typename Struct>
concept HasFields = requires {
  Fields<Struct>::fields;
};
template <HasFields Struct> void read_value(JsonReader& in, Struct& out, std::string_view field);
template <HasFields Struct> void write_value(JsonWriter& out, const Struct& value);
template <HasFields Struct>
void read_value(JsonReader& in, std::optional<Struct>& out, std::string_view field);
template <HasFields Struct> void write_value(JsonWriter& out, const std::optional<Struct>& value);
template <typename T> void read_value(JsonReader& in, std::vector<T>& out, std::string_view field);
template <typename T> void write_value(JsonWriter& out, const std::vector<T>& items);

// One member of a struct: its JSON name, what it is, and how it is read and written.
enum FieldFlag : unsigned {
  k_required = 1, // a document without it is refused
  k_detail = 2,   // skipped by a summary read (ReadScope::summary)
  k_private = 4,  // not in the public JSON (docs/json-output.md)
  k_nonempty = 8, // written only when not empty (an optional member of the format)
  k_listed = 16,  // with k_nonempty: the public JSON still writes it when empty (a list: [])
};

template <typename Struct> struct Field {
  std::string_view name;
  unsigned flags;
  void (*read)(JsonReader&, Struct&, std::string_view);
  void (*write)(JsonWriter&, const Struct&);
  bool (*empty)(const Struct&);
};

template <typename T> struct MemberOf;
template <typename Struct, typename Value> struct MemberOf<Value Struct::*> {
  using type = Struct;
  using value = Value;
};

template <typename V> bool is_empty_value(const V& value) {
  if constexpr (std::is_same_v<V, bool>) {
    return !value; // a flag is written (with k_nonempty) only when set
  } else if constexpr (requires { value.empty(); }) {
    return value.empty();
  } else if constexpr (requires { value.has_value(); }) {
    return !value.has_value();
  } else {
    return false;
  }
}

template <auto Member>
constexpr Field<typename MemberOf<decltype(Member)>::type> field(std::string_view name,
                                                                 unsigned flags = 0) {
  using Struct = typename MemberOf<decltype(Member)>::type;
  return {name, flags,
          [](JsonReader& in, Struct& s, std::string_view key) { read_value(in, s.*Member, key); },
          [](JsonWriter& out, const Struct& s) { write_value(out, s.*Member); },
          [](const Struct& s) { return is_empty_value(s.*Member); }};
}

// A field read by `Read` (one of the checked readers above) instead of its type's reader.
template <auto Member, auto Read>
constexpr Field<typename MemberOf<decltype(Member)>::type> checked_field(std::string_view name,
                                                                         unsigned flags = 0) {
  using Struct = typename MemberOf<decltype(Member)>::type;
  return {name, flags,
          [](JsonReader& in, Struct& s, std::string_view key) { Read(in, s.*Member, key); },
          [](JsonWriter& out, const Struct& s) { write_value(out, s.*Member); },
          [](const Struct& s) { return is_empty_value(s.*Member); }};
}

// Runs `read` on the value of `field`, naming `field` as the parent of whatever it rejects.
template <typename Read> auto nested(std::string_view field, Read read) {
  try {
    return read();
  } catch (ShapeError& e) {
    e.nest(field);
    throw;
  }
}

// Reads an object of `Struct`'s fields in any order, skipping unknown members (and, in a summary
// read, the k_detail ones). Keys usually come in the writer's order, so the next field is tried
// first.
template <HasFields Struct>
void read_fields(JsonReader& in, Struct& s, std::string_view field, bool summary = false) {
  constexpr auto& fields = Fields<Struct>::fields;
  expect(in, Kind::object, field, "an object");
  std::uint64_t seen = 0;
  size_t next = 0;
  nested(field, [&] {
    in.object([&](std::string_view key) {
      size_t at = next < fields.size() && fields[next].name == key ? next : fields.size();
      for (size_t i = 0; at == fields.size() && i < fields.size(); ++i) {
        if (fields[i].name == key) {
          at = i;
        }
      }
      if (at == fields.size()) {
        summary ? in.skip_roughly() : in.skip();
        return;
      }
      if (summary && (fields[at].flags & k_detail)) {
        in.skip_roughly();
      } else {
        fields[at].read(in, s, key);
      }
      seen |= std::uint64_t(1) << at;
      next = at + 1;
    });
    for (size_t i = 0; i < fields.size(); ++i) {
      if ((fields[i].flags & k_required) && !(seen & (std::uint64_t(1) << i))) {
        throw ShapeError{std::string(fields[i].name), "is missing"};
      }
    }
  });
}

template <HasFields Struct> void write_fields(JsonWriter& out, const Struct& s) {
  out.raw("{");
  bool first = true;
  for (const auto& f : Fields<Struct>::fields) {
    if ((f.flags & k_nonempty) && f.empty(s)) {
      continue;
    }
    out.raw(first ? "\"" : ",\"");
    first = false;
    out.raw(f.name); // our own literals: nothing to escape
    out.raw("\":");
    f.write(out, s);
  }
  out.raw("}");
}

template <HasFields Struct> void read_value(JsonReader& in, Struct& out, std::string_view field) {
  read_fields(in, out, field);
}
template <HasFields Struct> void write_value(JsonWriter& out, const Struct& value) {
  write_fields(out, value);
}

// An optional struct is null or its object.
template <HasFields Struct>
void read_value(JsonReader& in, std::optional<Struct>& out, std::string_view field) {
  if (in.take_null()) {
    out.reset();
    return;
  }
  out.emplace();
  read_fields(in, *out, field);
}
template <HasFields Struct> void write_value(JsonWriter& out, const std::optional<Struct>& value) {
  if (!value) {
    out.raw("null");
    return;
  }
  write_fields(out, *value);
}

// Arrays name the index of an element they reject: "history[2].to".
template <typename T> void read_value(JsonReader& in, std::vector<T>& out, std::string_view field) {
  expect(in, Kind::array, field, "an array");
  out.clear();
  in.array([&](size_t index) {
    T item{};
    try {
      read_value(in, item, "");
    } catch (ShapeError& e) {
      e.nest(std::string(field) + "[" + std::to_string(index) + "]");
      throw;
    }
    out.push_back(std::move(item));
  });
}
template <typename T> void write_value(JsonWriter& out, const std::vector<T>& items) {
  out.raw("[");
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) {
      out.raw(",");
    }
    write_value(out, items[i]);
  }
  out.raw("]");
}

} // namespace sandboxer::ledger_format
