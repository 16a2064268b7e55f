#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace sandboxer {

// Small file primitives shared by the ledger's neighbours (outbox, metrics, driver scratch space).
// Each throws Error (ExitCode::runtime) naming the path and the errno text.

// Creates each missing directory of `path` with mode 0700: the state directory and everything in
// it must be private even when a later step creates it first.
void make_private_dirs(const std::filesystem::path& path);

// Writes `text` to a temp file beside `path`, fsyncs it and renames it over `path`: a reader sees
// the old or the new content, never a mix. `mode` applies to a new file. Without `durable` the
// fsync is skipped: for files whose loss after a machine crash only costs repeated work.
void write_file_atomically(const std::filesystem::path& path, const std::string& text,
                           unsigned mode = 0644, bool durable = true);

// Makes the entries of `dir` (created, renamed, removed files) durable.
void sync_directory(const std::filesystem::path& dir);

// The whole content of `path`, or none when it does not exist.
std::optional<std::string> read_file_if_exists(const std::filesystem::path& path);

} // namespace sandboxer
