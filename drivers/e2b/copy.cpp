#include "drivers/e2b/copy.hpp"

#include <algorithm>
#include <cstdio>
#include <fmt/format.h>
#include <memory>
#include <random>
#include <spdlog/spdlog.h>

#include <sandboxer/error.hpp>
#include <sandboxer/interrupt.hpp>
#include <sandboxer/tar.hpp>

namespace sandboxer::drivers::e2b {
namespace {

using Kind = DriverError::Kind;

// Arguments of one batch command, under Linux's limit for one command line (ARG_MAX, 2 MiB at
// least) with room to spare, and small in envd's JSON request.
constexpr std::size_t k_batch_bytes = 96 * 1024;

// The sandbox side of a copy in: operations as arguments, so that no name is ever parsed by a
// shell. d DIR: make it; l TARGET PATH: a symbolic link replacing PATH; h EXISTING PATH: a hard
// link; m MODE MTIME PATH: permission bits and time; t MTIME PATH: a link's own time.
constexpr const char* k_apply_script = R"sh(set -e
while [ "$#" -gt 0 ]; do
  case "$1" in
    d) mkdir -p -- "$2"; shift 2 ;;
    l) rm -f -- "$3"; ln -s -- "$2" "$3"; shift 3 ;;
    h) ln -f -- "$2" "$3"; shift 3 ;;
    m) chmod "$2" -- "$4"; touch -c -d "@$3" -- "$4"; shift 4 ;;
    t) touch -c -h -d "@$2" -- "$3"; shift 3 ;;
    *) echo "unknown operation $1" >&2; exit 2 ;;
  esac
done
)sh";

// Exit 3: nothing at $1, not even a dangling link.
constexpr const char* k_stat_script = R"sh([ -e "$1" ] || [ -L "$1" ] || exit 3
exec find -L "$1" -maxdepth 0 -printf '%y\0%s\0%m\0%l\0'
)sh";

// Lists $1 (and what is under it) relative to its parent, as tar names it: type, mode, mtime,
// size, uid, gid, link target, path; every field ends with a NUL. $2 = 1: follow links.
constexpr const char* k_list_script = R"sh([ -e "$1" ] || [ -L "$1" ] || exit 3
cd -- "$(dirname -- "$1")" || exit 4
name=$(basename -- "$1")
if [ "$2" = 1 ]; then set -- -L; else set --; fi
exec find "$@" "./$name" -printf '%y\0%m\0%T@\0%s\0%U\0%G\0%l\0%p\0'
)sh";
constexpr int k_missing_status = 3;

std::string first_lines(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) {
    text.pop_back();
  }
  std::replace(text.begin(), text.end(), '\n', ';');
  return text.size() > 500 ? text.substr(0, 500) + "..." : text;
}

void check_absolute(const std::string& path, const char* what) {
  if (path.empty() || path.front() != '/') {
    throw DriverError(Kind::invalid_spec,
                      fmt::format("E2B {}: {} is not an absolute path", what, path));
  }
}

// `path` without trailing slashes ("/" stays "/").
std::string cp_trimmed(std::string path) {
  while (path.size() > 1 && path.back() == '/') {
    path.pop_back();
  }
  return path;
}

std::string cp_join(const std::string& directory, const std::string& name) {
  return directory == "/" ? "/" + name : directory + "/" + name;
}

// A name from the stream stays under the destination: the core packs the stream, but the check
// costs nothing and a name with ".." would write elsewhere in the sandbox.
void check_entry_name(const std::string& name) {
  bool bad = name.empty() || name.front() == '/';
  std::size_t start = 0;
  while (!bad && start <= name.size()) {
    auto end = name.find('/', start);
    if (end == std::string::npos) {
      end = name.size();
    }
    bad = name.compare(start, end - start, "..") == 0 && end - start == 2;
    start = end + 1;
  }
  if (bad) {
    throw DriverError(Kind::invalid_spec,
                      fmt::format("E2B copy: the stream names {}, outside the destination", name));
  }
}

// Runs the operations of k_apply_script in batches of at most k_batch_bytes of arguments.
class ApplyBatch {
public:
  ApplyBatch(const RunInSandbox& run, std::string sandbox_id)
      : m_run(run), m_sandbox_id(std::move(sandbox_id)) {}

  void add(std::initializer_list<std::string> operation) {
    for (const auto& word : operation) {
      m_bytes += word.size() + 1;
      m_args.push_back(word);
    }
    if (m_bytes >= k_batch_bytes) {
      flush();
    }
  }

  void flush() {
    if (m_args.empty()) {
      return;
    }
    std::vector<std::string> argv = {"sh", "-c", k_apply_script, "sandboxer-cp"};
    argv.insert(argv.end(), m_args.begin(), m_args.end());
    m_args.clear();
    m_bytes = 0;
    std::string err;
    int status = m_run(
        argv, [](std::string_view) {}, err);
    if (status != 0) {
      throw DriverError(
          Kind::error,
          fmt::format("E2B copy into sandbox {}: {} (exit {})", m_sandbox_id,
                      err.empty() ? "making links, directories or modes failed" : first_lines(err),
                      status));
    }
  }

private:
  const RunInSandbox& m_run;
  std::string m_sandbox_id;
  std::vector<std::string> m_args;
  std::size_t m_bytes = 0;
};

std::string octal_mode(uint32_t mode) {
  return fmt::format("{:o}", mode & 07777);
}

// The tar entries of a copy in, made in the sandbox as they are read.
class UploadSink : public tar::Sink {
public:
  UploadSink(const Envd& envd, ApplyBatch& batch, std::string directory)
      : m_envd(envd), m_batch(batch), m_directory(std::move(directory)) {}

  void begin(const tar::Entry& entry) override {
    check_entry_name(entry.path);
    std::string target = cp_join(m_directory, entry.path);
    std::string mtime = std::to_string(entry.mtime);
    switch (entry.type) {
    case tar::Type::directory:
      m_batch.add({"d", target});
      // Modes and times of directories last, deepest first: writing into a directory changes its
      // time, and a read-only one could not be filled.
      m_directories.push_back({target, octal_mode(entry.mode), mtime});
      break;
    case tar::Type::file:
      m_file = {target, octal_mode(entry.mode), mtime};
      m_in_file = true;
      m_buffer.clear();
      m_parts.clear();
      m_buffer.reserve(std::min<uint64_t>(entry.size, k_upload_part));
      break;
    case tar::Type::symlink:
      m_batch.add({"l", entry.link, target});
      m_batch.add({"t", mtime, target});
      break;
    case tar::Type::hardlink:
      check_entry_name(entry.link);
      m_batch.add({"h", cp_join(m_directory, entry.link), target});
      break;
    case tar::Type::other:
      spdlog::warn("E2B copy: {} is not a file, directory or link; skipped", entry.path);
      break;
    }
  }

  void data(std::string_view chunk) override {
    while (!chunk.empty()) {
      std::size_t take = std::min(chunk.size(), k_upload_part - m_buffer.size());
      m_buffer.append(chunk.substr(0, take));
      chunk.remove_prefix(take);
      if (m_buffer.size() == k_upload_part) {
        upload_part();
      }
    }
  }

  void end() override {
    if (!m_in_file) {
      return;
    }
    m_in_file = false;
    if (m_parts.empty()) {
      upload_file(m_envd, m_file.path, m_buffer);
    } else {
      if (!m_buffer.empty()) {
        upload_part();
      }
      compose_files(m_envd, m_parts, m_file.path);
      m_parts.clear();
    }
    m_buffer.clear();
    m_batch.add({"m", m_file.mode, m_file.mtime, m_file.path});
  }

  // After the stream: the directories' modes and times, deepest first.
  void finish_directories() {
    for (auto it = m_directories.rbegin(); it != m_directories.rend(); ++it) {
      m_batch.add({"m", it->mode, it->mtime, it->path});
    }
    m_directories.clear();
  }

  // Parts of an unfinished file, for removal after a failure.
  const std::vector<std::string>& pending_parts() const { return m_parts; }

private:
  struct Made {
    std::string path;
    std::string mode;
    std::string mtime;
  };

  // A part of a large file goes next to it under a hidden name, so that envd's compose
  // concatenates within one filesystem.
  void upload_part() {
    static thread_local std::mt19937_64 random{std::random_device{}()};
    auto slash = m_file.path.rfind('/');
    std::string part = fmt::format("{}.sandboxer-part-{:012x}-{}", m_file.path.substr(0, slash + 1),
                                   random() & 0xffffffffffff, m_parts.size());
    m_parts.push_back(part);
    upload_file(m_envd, part, m_buffer);
    m_buffer.clear();
  }

  const Envd& m_envd;
  ApplyBatch& m_batch;
  std::string m_directory;
  std::vector<Made> m_directories;
  Made m_file;
  bool m_in_file = false;
  std::string m_buffer;
  std::vector<std::string> m_parts;
};

// Reads NUL-terminated fields from a spooled listing.
class FieldReader {
public:
  explicit FieldReader(std::FILE* file) : m_file(file) {}
  // The next field, or false at the end of the listing.
  bool next(std::string& field) {
    field.clear();
    for (;;) {
      int c = std::getc(m_file);
      if (c == EOF) {
        if (!field.empty()) {
          throw DriverError(Kind::error, "E2B copy: the listing of the sandbox ended mid-entry");
        }
        return false;
      }
      if (c == '\0') {
        return true;
      }
      field += static_cast<char>(c);
    }
  }

private:
  std::FILE* m_file;
};

int64_t whole_seconds(const std::string& text) {
  try {
    return std::stoll(text.substr(0, text.find('.')));
  } catch (const std::exception&) {
    throw DriverError(Kind::error, fmt::format("E2B copy: the sandbox listed a time of {}", text));
  }
}

uint64_t listed_number(const std::string& text, int base) {
  try {
    return std::stoull(text, nullptr, base);
  } catch (const std::exception&) {
    throw DriverError(Kind::error, fmt::format("E2B copy: the sandbox listed {}", text));
  }
}

} // namespace

PathInfo stat_in_sandbox(const RunInSandbox& run, const std::string& path) {
  check_absolute(path, "stat");
  std::string out;
  std::string err;
  int status = run(
      {"sh", "-c", k_stat_script, "sandboxer-stat", path},
      [&](std::string_view bytes) { out.append(bytes.substr(0, 65536)); }, err);
  PathInfo info;
  if (status == k_missing_status) {
    return info;
  }
  if (status != 0) {
    throw DriverError(Kind::error,
                      fmt::format("E2B stat {}: {} (exit {})", path, first_lines(err), status));
  }
  std::vector<std::string> fields;
  std::size_t start = 0;
  for (std::size_t end; (end = out.find('\0', start)) != std::string::npos; start = end + 1) {
    fields.push_back(out.substr(start, end - start));
  }
  if (fields.size() != 4 || fields[0].empty()) {
    throw DriverError(Kind::error, fmt::format("E2B stat {}: unexpected answer from find", path));
  }
  switch (fields[0][0]) {
  case 'f':
    info.kind = PathInfo::Kind::file;
    break;
  case 'd':
    info.kind = PathInfo::Kind::directory;
    break;
  case 'l':
    info.kind = PathInfo::Kind::symlink; // with -L, only a link that leads nowhere
    info.link_target = fields[3];
    break;
  default:
    info.kind = PathInfo::Kind::other;
  }
  info.size = listed_number(fields[1], 10);
  info.mode = static_cast<uint32_t>(listed_number(fields[2], 8));
  return info;
}

void copy_into_sandbox(const Envd& envd, const RunInSandbox& run, const CopyInRequest& request,
                       CopySource& source) {
  if (request.owner) {
    throw DriverError(Kind::unsupported,
                      "cp --owner is not supported by driver e2b: files are made by envd as the "
                      "profile's e2b.user");
  }
  check_absolute(request.directory, "copy into");
  ApplyBatch batch(run, envd.sandbox_id);
  UploadSink sink(envd, batch, cp_trimmed(request.directory));
  tar::Reader reader(sink);
  std::vector<char> buffer(256 * 1024);
  try {
    for (;;) {
      std::size_t got = source.read(buffer.data(), buffer.size());
      if (got == 0) {
        break;
      }
      reader.feed(std::string_view(buffer.data(), got));
    }
    reader.finish();
    sink.finish_directories();
    batch.flush();
  } catch (const tar::Error& e) {
    throw DriverError(Kind::error, fmt::format("E2B copy: the stream is not tar: {}", e.what()));
  } catch (...) {
    if (!sink.pending_parts().empty()) {
      // The parts of a large file cut short would stay as hidden files: removed, best effort.
      interrupt::Shield shield;
      std::vector<std::string> argv = {"rm", "-f", "--"};
      argv.insert(argv.end(), sink.pending_parts().begin(), sink.pending_parts().end());
      std::string err;
      try {
        run(
            argv, [](std::string_view) {}, err);
      } catch (const std::exception& e) {
        spdlog::warn("E2B copy: could not remove the parts of an unfinished upload: {}", e.what());
      }
    }
    throw;
  }
}

void copy_out_of_sandbox(const Envd& envd, const RunInSandbox& run, const CopyOutRequest& request,
                         CopySink& sink) {
  check_absolute(request.path, "copy from");
  std::string path = cp_trimmed(request.path);
  // The listing may be long (a tree of a million names): it waits in a temporary file, not in
  // memory, while the files are downloaded.
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> listing(std::tmpfile(), &std::fclose);
  if (!listing) {
    throw DriverError(Kind::error, "E2B copy: cannot make a temporary file for the listing");
  }
  bool write_failed = false;
  std::string err;
  int status = run(
      {"sh", "-c", k_list_script, "sandboxer-cp", path, request.follow ? "1" : "0"},
      [&](std::string_view bytes) {
        write_failed |= std::fwrite(bytes.data(), 1, bytes.size(), listing.get()) != bytes.size();
      },
      err);
  if (status == k_missing_status) {
    throw DriverError(Kind::not_found, fmt::format("no such file or directory in sandbox {}: {}",
                                                   envd.sandbox_id, request.path));
  }
  if (status != 0) {
    throw DriverError(Kind::error, fmt::format("E2B copy: listing {} failed: {} (exit {})",
                                               request.path, first_lines(err), status));
  }
  if (write_failed || std::fflush(listing.get()) != 0) {
    throw DriverError(Kind::error, "E2B copy: cannot write the listing to a temporary file");
  }
  std::rewind(listing.get());

  std::string parent = path.substr(0, path.rfind('/'));
  if (parent.empty()) {
    parent = "/";
  }
  tar::Writer writer([&](std::string_view bytes) { sink.write(bytes); });
  FieldReader fields(listing.get());
  std::string type, mode, mtime, size, uid, gid, link, name;
  while (fields.next(type)) {
    if (!fields.next(mode) || !fields.next(mtime) || !fields.next(size) || !fields.next(uid) ||
        !fields.next(gid) || !fields.next(link) || !fields.next(name)) {
      throw DriverError(Kind::error, "E2B copy: the listing of the sandbox ended mid-entry");
    }
    interrupt::check();
    tar::Entry entry;
    entry.path = name.starts_with("./") ? name.substr(2) : name;
    entry.mode = static_cast<uint32_t>(listed_number(mode, 8));
    entry.mtime = whole_seconds(mtime);
    entry.uid = static_cast<int64_t>(listed_number(uid, 10));
    entry.gid = static_cast<int64_t>(listed_number(gid, 10));
    if (type == "d") {
      entry.type = tar::Type::directory;
    } else if (type == "l") {
      entry.type = tar::Type::symlink;
      entry.link = link;
    } else if (type == "f") {
      entry.type = tar::Type::file;
      entry.size = listed_number(size, 10);
    } else {
      spdlog::warn("E2B copy: {} in sandbox {} is not a file, directory or link; skipped",
                   cp_join(parent, entry.path), envd.sandbox_id);
      continue;
    }
    writer.begin(entry);
    if (entry.type == tar::Type::file) {
      uint64_t got = 0;
      std::string where = cp_join(parent, entry.path);
      download_file(envd, where, entry.size, [&](std::string_view chunk) {
        // More bytes than listed: the file grew. They are not written (the header holds the listed
        // size) and the copy fails below.
        if (got < entry.size) {
          writer.data(chunk.substr(
              0, static_cast<std::size_t>(std::min<uint64_t>(chunk.size(), entry.size - got))));
        }
        got += chunk.size();
      });
      if (got != entry.size) {
        throw DriverError(Kind::error,
                          fmt::format("E2B copy: {} changed while it was copied ({} bytes listed, "
                                      "{} read)",
                                      where, entry.size, got));
      }
    }
    writer.end();
  }
  writer.finish();
}

} // namespace sandboxer::drivers::e2b
