#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace sandboxer {

// The rules for what users name things, in one place: the CLI, profiles and the lifecycle all
// check here. Each returns why `text` is refused, or nullopt when it is fine.

// A sandbox name: 1-63 of [A-Za-z0-9._-], not starting with "." or "-", and not shaped like an
// id (sbx-, snp-, ldg-), which would make `destroy NAME` ambiguous. Names end up in container
// names, hostnames, file names and terminals: nothing else is safe in all of them.
std::optional<std::string> name_problem(std::string_view name);

// A label key: 1-253 of [A-Za-z0-9._/-] (Docker and Kubernetes accept these).
std::optional<std::string> label_key_problem(std::string_view key);

// A label value: at most 256 bytes of valid UTF-8 without control characters (C0, DEL, C1) or
// bidirectional formatting marks, which would let a value rewrite what a terminal shows.
std::optional<std::string> label_value_problem(std::string_view value);

// `text` with every control character and bidirectional mark escaped (\n, \x1b, \u202e): safe to
// print in a table on a terminal, whatever an old record holds.
std::string printable(std::string_view text);

} // namespace sandboxer
