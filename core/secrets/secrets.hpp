#pragma once
// Secrets: a profile's references ({name: {env: VAR} | {file: PATH}}) and their values. The
// ledger keeps the references; the values live in memory only, for the driver that needs them
// and for the ledger's or a sink's credentials.

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "core/profile/profile.hpp"

namespace sandboxer {

// The profile's secrets as references ({name: {env|file: ...}}), never values.
nlohmann::json secret_refs_of(const Profile& profile);
// The values of secret references ({name: {env: VAR} | {file: PATH}}), in memory only; each value
// is registered for redaction (log::add_secret) before it is returned. Throws Error (usage)
// naming the secret when its variable is unset or its file unreadable.
std::map<std::string, std::string> resolve_secrets(const nlohmann::json& refs);

} // namespace sandboxer
