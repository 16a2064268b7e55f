#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

// The ustar header block's layout, shared by the reader and the writer.
namespace sandboxer::tar {

constexpr size_t k_block = 512;
constexpr size_t k_name = 0;
constexpr size_t k_mode = 100;
constexpr size_t k_uid = 108;
constexpr size_t k_gid = 116;
constexpr size_t k_size = 124;
constexpr size_t k_mtime = 136;
constexpr size_t k_checksum = 148;
constexpr size_t k_type = 156;
constexpr size_t k_link = 157;
constexpr size_t k_magic = 257;
constexpr size_t k_version = 263;
constexpr size_t k_uname = 265;
constexpr size_t k_gname = 297;
constexpr size_t k_prefix = 345;

// The header's checksum: the sum of its bytes with the checksum field read as spaces.
uint64_t checksum_of(const char* block);
// Whether the stored checksum matches (as unsigned bytes, or as signed ones as old tars summed).
bool checksum_ok(const char* block);
// A numeric field: octal digits (space or NUL padded), or GNU's base-256 (high bit set);
// nullopt for anything else or a negative value.
std::optional<uint64_t> parse_number(const char* field, size_t size);
// POSIX ustar ("ustar\0", whose prefix field extends the name), not GNU's "ustar  ".
bool is_posix_ustar(const char* block);

} // namespace sandboxer::tar
