// The ledger's value codecs (codec.hpp): each value read straight from the text into its field,
// checked, and written back exactly as read.
#include "core/ledger/codec.hpp"

#include <array>
#include <climits>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <sandboxer/error.hpp>

#include "sdk/json/limits.hpp"

namespace sandboxer::ledger_format {

using json = nlohmann::json;

std::string ShapeError::describe() const {
  return field.empty() ? problem : fmt::format("field \"{}\" {}", field, problem);
}

void ShapeError::nest(std::string_view outer) {
  if (!outer.empty()) {
    field = field.empty() ? std::string(outer) : fmt::format("{}.{}", outer, field);
  }
}

namespace {

const char* kind_phrase(Kind kind) {
  switch (kind) {
  case Kind::null:
    return "null";
  case Kind::boolean:
    return "a boolean";
  case Kind::number:
    return "a number";
  case Kind::string:
    return "a string";
  case Kind::object:
    return "an object";
  case Kind::array:
    return "an array";
  }
  return "a value";
}

std::string_view read_text(JsonReader& in, std::string& scratch, std::string_view field,
                           std::string_view expected) {
  expect(in, Kind::string, field, expected);
  return in.string(scratch);
}

template <size_t N>
void read_word(JsonReader& in, std::string& out, std::string_view field,
               const std::array<std::string_view, N>& words) {
  std::string scratch;
  const std::string_view text = read_text(in, scratch, field, "a word");
  for (const auto word : words) {
    if (text == word) {
      out = word;
      return;
    }
  }
  throw ShapeError{std::string(field),
                   fmt::format("is \"{}\", expected one of {}", text, fmt::join(words, ", "))};
}

constexpr std::array<std::string_view, 2> k_pause_causes = {"user", "idle"};
constexpr std::array<std::string_view, 2> k_paused_max_actions = {"destroy", "snapshot"};
constexpr std::array<std::string_view, 3> k_idle_actions = {"destroy", "pause", "snapshot"};

} // namespace

void expect(JsonReader& in, Kind kind, std::string_view field, std::string_view expected) {
  const Kind got = in.peek();
  if (got != kind) {
    throw ShapeError{std::string(field),
                     fmt::format("is {}, expected {}", kind_phrase(got), expected)};
  }
}

std::int64_t read_integer(JsonReader& in, std::string_view field, std::int64_t min,
                          std::int64_t max, std::string_view expected) {
  expect(in, Kind::number, field, expected);
  const json number = in.number();
  const bool fits = number.is_number_unsigned()
                        ? number.get<std::uint64_t>() <= static_cast<std::uint64_t>(max)
                    : number.is_number_integer()
                        ? number.get<std::int64_t>() >= min && number.get<std::int64_t>() <= max
                        : false;
  if (!fits) {
    throw ShapeError{std::string(field),
                     fmt::format("is {}, expected {}", number.dump(), expected)};
  }
  return number.get<std::int64_t>();
}

void read_value(JsonReader& in, std::string& out, std::string_view field) {
  expect(in, Kind::string, field, "a string");
  in.string_into(out);
}

void read_value(JsonReader& in, std::optional<std::string>& out, std::string_view field) {
  if (in.take_null()) {
    out.reset();
    return;
  }
  expect(in, Kind::string, field, "a string or null");
  out.emplace();
  in.string_into(*out);
}

void read_value(JsonReader& in, TimePoint& out, std::string_view field) {
  std::string scratch;
  const std::string_view text = read_text(in, scratch, field, "an RFC 3339 time string");
  const auto t = parse_time(text);
  if (!t) {
    throw ShapeError{std::string(field), fmt::format("is \"{}\", expected an RFC 3339 time such as "
                                                     "\"2026-12-02T11:51:32Z\"",
                                                     text)};
  }
  out = *t;
}

void read_value(JsonReader& in, std::optional<TimePoint>& out, std::string_view field) {
  if (in.take_null()) {
    out.reset();
    return;
  }
  read_value(in, out.emplace(), field);
}

void read_value(JsonReader& in, std::optional<Seconds>& out, std::string_view field) {
  if (in.take_null()) {
    out.reset();
    return;
  }
  std::string scratch;
  const std::string_view text = read_text(in, scratch, field, "a duration such as \"1h30m\"");
  out = parse_duration(text);
  if (!out) {
    throw ShapeError{std::string(field), fmt::format("is \"{}\", expected a duration {}", text,
                                                     duration_problem(text))};
  }
}

void read_value(JsonReader& in, State& out, std::string_view field) {
  std::string scratch;
  const std::string_view text = read_text(in, scratch, field, "a state name");
  const auto state = state_from_string(text);
  if (!state) {
    throw ShapeError{std::string(field),
                     fmt::format("is \"{}\", expected one of creating, running, snapshotting, "
                                 "destroying, destroyed, failed, expired, orphaned, paused, "
                                 "pausing, resuming",
                                 text)};
  }
  out = *state;
}

void read_value(JsonReader& in, std::optional<State>& out, std::string_view field) {
  if (in.take_null()) {
    out.reset();
    return;
  }
  read_value(in, out.emplace(), field);
}

void read_value(JsonReader& in, EventKind& out, std::string_view field) {
  std::string scratch;
  const std::string_view text = read_text(in, scratch, field, "an event kind");
  const auto kind = event_kind_from_string(text);
  if (!kind) {
    throw ShapeError{std::string(field),
                     fmt::format("is \"{}\", not an event kind of docs/events.md", text)};
  }
  out = *kind;
}

void read_value(JsonReader& in, int& out, std::string_view field) {
  out = static_cast<int>(read_integer(in, field, INT_MIN, INT_MAX, "an integer"));
}

void read_value(JsonReader& in, bool& out, std::string_view field) {
  expect(in, Kind::boolean, field, "true or false");
  out = in.boolean();
}

void read_value(JsonReader& in, std::optional<bool>& out, std::string_view field) {
  if (in.take_null()) {
    out.reset();
    return;
  }
  expect(in, Kind::boolean, field, "true, false or null");
  out = in.boolean();
}

void read_pause_cause(JsonReader& in, std::string& out, std::string_view field) {
  read_word(in, out, field, k_pause_causes);
}

void read_on_paused_max(JsonReader& in, std::string& out, std::string_view field) {
  read_word(in, out, field, k_paused_max_actions);
}

void read_on_idle(JsonReader& in, std::string& out, std::string_view field) {
  read_word(in, out, field, k_idle_actions);
}

void read_cost(JsonReader& in, json& out, std::string_view field) {
  if (in.take_null()) {
    out = nullptr;
    return;
  }
  expect(in, Kind::object, field, "an object or null");
  out = in.any();
}

void read_value(JsonReader& in, std::optional<std::uint64_t>& out, std::string_view field) {
  if (in.take_null()) {
    out.reset();
    return;
  }
  out = static_cast<std::uint64_t>(
      read_integer(in, field, 0, INT64_MAX, "a non-negative integer or null"));
}

void read_value(JsonReader& in, std::optional<int>& out, std::string_view field) {
  if (in.take_null()) {
    out.reset();
    return;
  }
  out = static_cast<int>(read_integer(in, field, INT_MIN, INT_MAX, "an integer or null"));
}

void read_value(JsonReader& in, std::map<std::string, std::string>& out, std::string_view field) {
  expect(in, Kind::object, field, "an object of strings");
  out.clear();
  nested(field, [&] {
    in.object([&](std::string_view key) {
      std::string value;
      read_value(in, value, key);
      // The writer emits keys in order, so the hint makes each insertion constant time.
      out.insert_or_assign(out.end(), std::string(key), std::move(value));
    });
  });
}

void read_value(JsonReader& in, json& out, std::string_view) {
  out = in.any();
}

void write_value(JsonWriter& out, const std::string& value) {
  out.string(value);
}
void write_value(JsonWriter& out, const std::optional<std::string>& value) {
  out.optional_string(value);
}
void write_value(JsonWriter& out, const TimePoint& value) {
  out.time(value);
}
void write_value(JsonWriter& out, const std::optional<TimePoint>& value) {
  out.optional_time(value);
}
void write_value(JsonWriter& out, const std::optional<Seconds>& value) {
  if (value) {
    out.string(format_duration(*value));
  } else {
    out.raw("null");
  }
}
void write_value(JsonWriter& out, const State& value) {
  out.string(to_string(value));
}
void write_value(JsonWriter& out, const std::optional<State>& value) {
  if (value) {
    out.string(to_string(*value));
  } else {
    out.raw("null");
  }
}
void write_value(JsonWriter& out, const EventKind& value) {
  out.string(to_string(value));
}
void write_value(JsonWriter& out, const int& value) {
  out.integer(value);
}
void write_value(JsonWriter& out, const bool& value) {
  out.raw(value ? "true" : "false");
}
void write_value(JsonWriter& out, const std::optional<bool>& value) {
  out.raw(!value ? "null" : *value ? "true" : "false");
}
void write_value(JsonWriter& out, const std::optional<std::uint64_t>& value) {
  if (value) {
    out.integer(*value);
  } else {
    out.raw("null");
  }
}
void write_value(JsonWriter& out, const std::optional<int>& value) {
  if (value) {
    out.integer(*value);
  } else {
    out.raw("null");
  }
}
void write_value(JsonWriter& out, const std::map<std::string, std::string>& value) {
  out.string_map(value);
}
void write_value(JsonWriter& out, const json& value) {
  // What the reader would refuse is never written: a commit fails rather than leave a ledger that
  // no later command can read.
  if (!out.any(value, json_limits::k_max_value_depth)) {
    throw Error(ExitCode::runtime,
                fmt::format("refusing to write a value nested deeper than {} levels to the ledger",
                            json_limits::k_max_value_depth));
  }
}

} // namespace sandboxer::ledger_format
