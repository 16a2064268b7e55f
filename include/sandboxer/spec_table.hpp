#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <sandboxer/driver.hpp>

// A driver's spec written once: a table of fields (name, member, codec, documentation, flags)
// from which reading with located errors and did-you-mean, the normalized JSON the ledger stores,
// and the section's JSON Schema all come, as core/ledger/fields.hpp is for records. A new field
// is one line of the table (plus its documentation in docs/drivers/NAME.md).
namespace sandboxer::spec {

using json = nlohmann::json;

// Where a value is read: its JSON pointer inside the section, and where a relative local path
// resolves (the profile's directory, or the working directory for a stored spec).
struct ReadContext {
  std::string pointer;
  std::function<std::filesystem::path(const std::string& pointer)> directory_of;
  bool from_profile = false; // local files a profile names must exist; a stored spec's need not
  ReadContext at(const std::string& key) const {
    return {pointer + "/" + key, directory_of, from_profile};
  }
};

// How one value type is read, written and described.
template <class T> struct Codec {
  std::function<T(const json& value, const ReadContext& at)> read;
  std::function<json(const T& value)> write;
  json schema;
  // This codec with one more check of the value read (throws SpecError at `at.pointer`).
  Codec checked(std::function<void(const T& value, const ReadContext& at)> check) const {
    Codec out = *this;
    out.read = [read = read, check = std::move(check)](const json& value, const ReadContext& at) {
      T parsed = read(value, at);
      check(parsed, at);
      return parsed;
    };
    return out;
  }
  // This codec with `extra` merged into its schema (a description, a minLength).
  Codec described(json extra) const {
    Codec out = *this;
    out.schema.merge_patch(extra);
    return out;
  }
};

// The codecs of the plain kinds. Each error names the pointer and what was expected.
Codec<std::string> text();     // a non-empty string
Codec<std::string> any_text(); // a string, empty allowed
Codec<std::string> text_matching(const std::string& regex, std::string expected);
Codec<std::vector<std::string>> strings();
Codec<std::map<std::string, std::string>> string_map(); // numbers and booleans kept as text
Codec<bool> boolean();
Codec<int> integer(int low, int high); // a number or its digits
// "500ms", "30s", "2m": written in the largest unit that is exact ("30s", "1500ms").
Codec<std::chrono::milliseconds> duration_ms();
// The same, written in milliseconds always ("30000ms").
Codec<std::chrono::milliseconds> duration_in_ms();
// duration_ms where "0" (none at all) is a setting, not a missing timeout.
Codec<std::chrono::milliseconds> duration_ms_or_zero();
Codec<std::chrono::seconds> seconds();       // parse_duration's grammar, written by format_duration
Codec<std::chrono::seconds> whole_seconds(); // a duration_ms that must be whole seconds
// An http(s) endpoint, checked as checked_endpoint does; `credential` names what it would carry.
Codec<std::string> endpoint(std::string key, std::string credential);
// A local path: "~/" expands, a relative one resolves against the profile's directory; with
// `must_exist`, a profile's must name a regular file.
Codec<std::filesystem::path> local_path(bool must_exist);

// One of a few names, each standing for a value.
template <class E> Codec<E> one_of(std::vector<std::pair<std::string, E>> names) {
  json listed = json::array();
  std::string expected;
  for (size_t i = 0; i < names.size(); ++i) {
    listed.push_back(names[i].first);
    expected += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i].first;
  }
  return {[names, expected](const json& value, const ReadContext& at) {
            std::string text = value.is_string() ? value.get<std::string>() : value.dump();
            for (const auto& [name, item] : names) {
              if (name == text) {
                return item;
              }
            }
            throw SpecError(at.pointer, "expected " + expected + ", not " + text);
          },
          [names](const E& value) {
            for (const auto& [name, item] : names) {
              if (item == value) {
                return json(name);
              }
            }
            return json(nullptr);
          },
          {{"enum", listed}}};
}

// A list, each item read with `item` at its index; `expected` is said when it is not a list.
template <class T> Codec<std::vector<T>> list_of(Codec<T> item, std::string expected) {
  return {[read = item.read, expected](const json& value, const ReadContext& at) {
            if (!value.is_array()) {
              throw SpecError(at.pointer, expected);
            }
            std::vector<T> items;
            for (size_t i = 0; i < value.size(); ++i) {
              items.push_back(read(value[i], at.at(std::to_string(i))));
            }
            return items;
          },
          [write = item.write](const std::vector<T>& items) {
            json out = json::array();
            for (const T& one : items) {
              out.push_back(write(one));
            }
            return out;
          },
          {{"type", "array"}, {"items", item.schema}}};
}

// When a field is written into the normalized spec.
enum class Write {
  always,       // every spec has it (its default when the profile does not say)
  if_not_empty, // a list or a map, left out when empty
};

template <class Spec> struct Field {
  std::string name;
  std::function<void(Spec& spec, const json& value, const ReadContext& at)> read;
  std::function<void(const Spec& spec, json& section)> write;
  json schema;
  bool required = false;
};

// A field bound to a member. An optional member is written only when set.
// The parts both kinds of member share: the reader and the documented schema.
template <class Spec, class Member, class T>
Field<Spec> bound_field(const std::string& name, Member Spec::*member, const Codec<T>& codec,
                        const std::string& doc,
                        std::function<void(const Spec& spec, json& section)> write) {
  json schema = codec.schema;
  if (!doc.empty()) {
    schema["description"] = doc;
  }
  return {name,
          [member, read = codec.read](Spec& spec, const json& value, const ReadContext& at) {
            spec.*member = read(value, at);
          },
          std::move(write), std::move(schema)};
}

template <class Spec, class T>
Field<Spec> field(std::string name, T Spec::*member, Codec<T> codec, std::string doc = "",
                  Write when = Write::always) {
  return bound_field<Spec>(
      name, member, codec, doc,
      [name, member, write = codec.write, when](const Spec& spec, json& section) {
        const T& value = spec.*member;
        if constexpr (requires { value.empty(); }) {
          if (when == Write::if_not_empty && value.empty()) {
            return;
          }
        }
        section[name] = write(value);
      });
}

template <class Spec, class T>
Field<Spec> field(std::string name, std::optional<T> Spec::*member, Codec<T> codec,
                  std::string doc = "") {
  return bound_field<Spec>(name, member, codec, doc,
                           [name, member, write = codec.write](const Spec& spec, json& section) {
                             if (const auto& value = spec.*member) {
                               section[name] = write(*value);
                             }
                           });
}

// The same field, required.
template <class Spec> Field<Spec> required(Field<Spec> field) {
  field.required = true;
  return field;
}

// The same field with its schema replaced where the reader takes more than one codec says (a
// number or its digits, a path kept as written).
template <class Spec> Field<Spec> with_schema(Field<Spec> field, json schema) {
  field.schema = std::move(schema);
  return field;
}

template <class Spec> struct Table {
  std::string driver; // its name: the schema's $id and title
  std::vector<Field<Spec>> fields;
  // What a section that is not a mapping gets told.
  std::string not_a_mapping = "expected a mapping";
  // Checks of the raw section before its keys (a key some users expect, told where it lives).
  std::function<void(const json& section)> before;
  // Checks across fields once all are read.
  std::function<void(Spec& spec)> after;
  // More of the schema's top level (anyOf of required keys) and $defs beyond duration and
  // duration_ms.
  json schema_extra = json::object();
  json defs = json::object();
};

// The parts that do not depend on the spec's type.
namespace detail {
// A table's keys, which every read checks a section against.
struct Shape {
  std::vector<std::string> keys;
  std::vector<std::string> required_keys;
};
template <class Spec> Shape shape_of(const Table<Spec>& table) {
  Shape shape;
  for (const auto& field : table.fields) {
    shape.keys.push_back(field.name);
    if (field.required) {
      shape.required_keys.push_back(field.name);
    }
  }
  return shape;
}
// Each key's schema: only when a schema is made, not at every read.
template <class Spec> json properties_of(const Table<Spec>& table) {
  json properties = json::object();
  for (const auto& field : table.fields) {
    properties[field.name] = field.schema;
  }
  return properties;
}
void check_section(const json& section, const Shape& shape, const std::string& not_a_mapping,
                   const std::string& pointer);
// {"type": "object", "additionalProperties": false, its properties and required keys} + extra.
json object_schema(const Shape& shape, const json& properties, const json& extra);
// object_schema as a document of its own: $schema, $id and title of the driver, and $defs.
json schema(const std::string& driver, const Shape& shape, const json& properties,
            const json& extra, const json& defs);
} // namespace detail

// Reads a section at `at` (its pointer is the section's, "" for a driver's own section).
template <class Spec>
Spec read(const Table<Spec>& table, const json& section, const ReadContext& at) {
  if (table.before && section.is_object()) {
    table.before(section);
  }
  detail::check_section(section, detail::shape_of(table), table.not_a_mapping, at.pointer);
  Spec spec;
  for (const auto& field : table.fields) {
    if (auto found = section.find(field.name); found != section.end()) {
      field.read(spec, *found, at.at(field.name));
    }
  }
  if (table.after) {
    table.after(spec);
  }
  return spec;
}

// A stored spec: relative paths resolve against the working directory, files need not exist.
template <class Spec> Spec read(const Table<Spec>& table, const json& section) {
  return read(table, section,
              ReadContext{"", [](const std::string&) { return std::filesystem::current_path(); }});
}

// A section from a profile: relative paths resolve with `origin`, the files it names must exist.
template <class Spec>
Spec read(const Table<Spec>& table, const json& section, const SpecOrigin& origin) {
  return read(table, section, ReadContext{"", origin.directory_of, true});
}

// The normalized form the ledger stores; read(write(s)) == s.
template <class Spec> json write(const Table<Spec>& table, const Spec& spec) {
  json out = json::object();
  for (const auto& field : table.fields) {
    field.write(spec, out);
  }
  return out;
}

// The section's JSON Schema, as schemas/drivers/NAME.schema.json publishes it.
template <class Spec> json schema_of(const Table<Spec>& table) {
  return detail::schema(table.driver, detail::shape_of(table), detail::properties_of(table),
                        table.schema_extra, table.defs);
}

// A nested mapping read with a table of its own (docker's readiness, vm-packer's exec); the
// table must outlive the codec (a function's static).
template <class Sub> Codec<Sub> object(const Table<Sub>& table) {
  return {[&table](const json& value, const ReadContext& at) { return read(table, value, at); },
          [&table](const Sub& value) { return write(table, value); },
          detail::object_schema(detail::shape_of(table), detail::properties_of(table),
                                table.schema_extra)};
}

// The DriverFactory glue every built-in driver shares: parse_spec and parse_profile_section
// normalize through the table, schema() is the table's.
template <class Spec> class TableFactory : public DriverFactory {
public:
  nlohmann::json parse_spec(const nlohmann::json& section) const override {
    return write(spec_table(), read(spec_table(), section));
  }
  nlohmann::json parse_profile_section(const nlohmann::json& section,
                                       const SpecOrigin& origin) const override {
    return write(spec_table(), read(spec_table(), section, origin));
  }
  nlohmann::json schema() const override { return schema_of(spec_table()); }
  // A stored spec, bound.
  Spec bind(const nlohmann::json& stored) const { return read(spec_table(), stored); }

protected:
  virtual const Table<Spec>& spec_table() const = 0;
};

} // namespace sandboxer::spec
