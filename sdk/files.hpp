#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

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

// Opens `path` with `flags` (O_RDONLY, O_RDWR, ..., never O_CREAT) as a file only the effective
// user controls: no symlink is followed, a FIFO never blocks the open, and the file must be a
// regular one that this user owns and no group or other may write. Returns the descriptor, or -1
// with errno set when it cannot be opened (ENOENT: it does not exist); throws Error naming
// `what`, the path and the problem when it is there but not the user's own.
// Another user who can write a directory the ledger uses cannot then make sandboxer read, block
// on or truncate what they planted there.
int open_own_file(const std::filesystem::path& path, int flags, std::string_view what);

// Checks that `dir` is a directory (not a symlink to one) that the effective user owns and no
// group or other may write; throws Error naming `what` and the path otherwise.
void check_own_directory(const std::filesystem::path& dir, std::string_view what);

// The whole content of `path` (opened as by open_own_file), or none when it does not exist.
// More than `limit` bytes is an error.
std::optional<std::string> read_file_if_exists(const std::filesystem::path& path,
                                               std::string_view what = "file",
                                               size_t limit = 256u << 20);

} // namespace sandboxer
