#pragma once

#include <string>

#include "pg/connection.hpp"

// The PostgreSQL ledger's tables (schema `sandboxer`), created and upgraded by sandboxer itself:
// numbered steps, each applied in the transaction that records its number, under an advisory
// lock so that machines starting together migrate once. docs/fleet.md lists the tables.
namespace sandboxer::ledger::pg {

// The schema version this binary writes and understands.
constexpr int k_schema_version = 5;

// The version the database is at: 0 when it has no sandboxer schema yet.
int schema_version(Connection& connection);

// Brings the schema to k_schema_version; `by` is recorded ("host pid"). Returns what it did
// ("created at version 1", "already at version 1", "migrated from 1 to 2"). A database at a newer
// version than k_schema_version is refused (exit 1), and nothing is changed.
std::string migrate(Connection& connection, const std::string& by);

} // namespace sandboxer::ledger::pg
