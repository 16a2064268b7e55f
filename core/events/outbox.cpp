// The outbox: events written before the ledger change they describe is committed, made
// deliverable right after it, and settled against the ledger when a process died in between.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <set>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <sandboxer/error.hpp>
#include <sandboxer/http.hpp>
#include <sandboxer/lock_file.hpp>
#include <sandboxer/log.hpp>

#include "core/events/events.hpp"
#include "core/owner.hpp"
#include "sdk/file_descriptor.hpp"
#include "sdk/files.hpp"

namespace sandboxer::events {
namespace fs = std::filesystem;

namespace {

constexpr std::string_view k_prepared = ".prepared";
constexpr std::string_view k_committed = ".json";

// The event files of `dir` ("<seq>-<id>.prepared" or ".json"), sorted: by sequence, as the names
// start with the zero-padded number.
std::vector<std::string> event_files(const fs::path& dir) {
  std::vector<std::string> names;
  DIR* handle = ::opendir(dir.c_str());
  if (handle == nullptr) {
    if (errno == ENOENT) {
      return names;
    }
    throw Error(ExitCode::runtime,
                fmt::format("cannot read outbox {}: {}", dir.string(), std::strerror(errno)));
  }
  while (dirent* entry = ::readdir(handle)) {
    std::string_view name = entry->d_name;
    if (!name.empty() && name[0] != '.' &&
        (name.ends_with(k_prepared) || name.ends_with(k_committed))) {
      names.emplace_back(name);
    }
  }
  ::closedir(handle);
  std::sort(names.begin(), names.end());
  return names;
}

// "<seq>-<event id>" of a file name.
std::string_view stem_of(std::string_view name) {
  return name.substr(0, name.rfind('.'));
}

std::string event_id_of(std::string_view name) {
  std::string_view stem = stem_of(name);
  auto dash = stem.find('-');
  return std::string(dash == std::string_view::npos ? stem : stem.substr(dash + 1));
}

// Writes a new file and makes its content durable before the ledger commit that needs it. The
// name is a fresh event id: O_EXCL|O_NOFOLLOW refuse anything already there, a planted symlink
// above all.
void write_synced(const fs::path& path, const std::string& text) {
  FileDescriptor fd(
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  size_t written = 0;
  while (fd.get() >= 0 && written < text.size()) {
    ssize_t n = ::write(fd.get(), text.data() + written, text.size() - written);
    if (n < 0 && errno != EINTR) {
      break;
    }
    written += n > 0 ? static_cast<size_t>(n) : 0;
  }
  if (fd.get() < 0 || written < text.size() || ::fsync(fd.get()) != 0) {
    int saved = errno;
    ::unlink(path.c_str());
    throw Error(ExitCode::runtime,
                fmt::format("cannot write event {} to the outbox: {}; nothing was changed",
                            path.string(), std::strerror(saved)));
  }
}

// The sinks of `record`'s events. With `host` (a shared ledger), the machine's own sinks are
// bound to it: another machine would write its own file, run its own hook.
nlohmann::json sinks_of(const SandboxRecord& record, const nlohmann::json& global_sinks,
                        const std::string& host) {
  nlohmann::json sinks = nlohmann::json::object();
  auto add = [&](const nlohmann::json& list) {
    if (!list.is_array()) {
      return;
    }
    for (const auto& sink : list) {
      if (!sink.is_object()) {
        continue;
      }
      nlohmann::json copy = sink;
      if (!host.empty() && !reachable_from_any_machine(sink)) {
        copy["host"] = host;
      }
      // Keyed before the move: the right side of an assignment is evaluated first.
      std::string key = sink_key(copy);
      sinks[key] = std::move(copy);
    }
  };
  add(global_sinks);
  // The profile's sinks were fixed at create time, like its TTL policy.
  add(record.policy.events);
  return sinks;
}

} // namespace

Outbox::Outbox(fs::path state_dir, const Ledger* ledger)
    : m_dir(std::move(state_dir) / "outbox"), m_ledger(ledger),
      m_kept(ledger ? ledger->store().kept_events() : nullptr), m_host(m_kept ? host_name() : "") {}

bool Outbox::in_closed_record(const fs::path& file, const std::string& event_id) const {
  if (!m_ledger) {
    return false;
  }
  auto text = read_file_if_exists(file);
  try {
    auto doc = nlohmann::json::parse(text.value_or("{}"));
    auto record = m_ledger->find(doc.at("event").at("subject").get<std::string>());
    return record && std::any_of(record->history.begin(), record->history.end(),
                                 [&](const HistoryEntry& e) { return e.event_id == event_id; });
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

void Outbox::settle_leftovers(LedgerStore::Transaction& tx) {
  if (m_kept) {
    // The files are the local ledger's: judged against it (`--ledger local`), never against a
    // shared one, which would find none of them committed and drop them.
    return;
  }
  std::vector<std::string> prepared;
  for (auto& name : event_files(m_dir)) {
    if (name.ends_with(k_prepared)) {
      prepared.push_back(std::move(name));
    }
  }
  if (prepared.empty()) {
    return;
  }
  for (const auto& name : prepared) {
    fs::path file = m_dir / name;
    // A record closed by that commit has left the live part: looked up by the event's subject.
    if (tx.event_committed(event_id_of(name)) || in_closed_record(file, event_id_of(name))) {
      fs::path target = m_dir / (std::string(stem_of(name)) + std::string(k_committed));
      ::rename(file.c_str(), target.c_str());
      spdlog::info("outbox: event {} of an interrupted process is committed; it will be delivered",
                   event_id_of(name));
    } else {
      ::unlink(file.c_str());
      spdlog::info("outbox: event {} of an interrupted process was never committed; dropped",
                   event_id_of(name));
    }
  }
}

void Outbox::stage(LedgerStore::Transaction& tx, SandboxRecord& record, size_t first,
                   const nlohmann::json& global_sinks) {
  std::lock_guard lock(m_mutex);
  // Anything still listed here is from a commit that failed: settle_leftovers() judges it.
  m_staged.clear();
  settle_leftovers(tx);
  nlohmann::json sinks = sinks_of(record, global_sinks, m_host);
  std::vector<size_t> staged;
  for (size_t i = first; i < record.history.size(); ++i) {
    record.history[i].event_id = new_event_id();
    staged.push_back(i);
  }
  if (sinks.empty() || staged.empty()) {
    for (size_t n = 0; n < staged.size(); ++n) {
      tx.next_event_seq();
    }
    return;
  }
  for (const auto& [key, sink] : sinks.items()) {
    if (sink.value("type", "") == "http") {
      // Starts loading libcurl on its own thread: it overlaps the fsyncs below and the commit.
      http::curl_transport();
      break;
    }
  }
  bool dirs_made = false;
  for (size_t i : staged) {
    std::uint64_t sequence = tx.next_event_seq();
    nlohmann::json file = {{"sequence", sequence},
                           {"sinks", sinks},
                           {"event", cloud_event(record, i, tx.ledger_id(), sequence)}};
    std::string text = log::redact(file.dump());
    if (tx.keep_event({sequence, record.history[i].event_id, record.id,
                       file["event"].value("type", ""), text})) {
      continue;
    }
    if (!std::exchange(dirs_made, true)) {
      make_private_dirs(m_dir / "sinks");
    }
    fs::path path =
        m_dir / fmt::format("{:020}-{}{}", sequence, record.history[i].event_id, k_prepared);
    write_synced(path, text + "\n");
    m_staged.push_back(std::move(path));
  }
  if (dirs_made) {
    sync_directory(m_dir);
  }
}

void Outbox::committed() {
  std::lock_guard lock(m_mutex);
  for (const auto& path : m_staged) {
    fs::path target = path;
    target.replace_extension(k_committed);
    // Not fsync'd: if this rename is lost, the .prepared file is settled against the ledger.
    if (::rename(path.c_str(), target.c_str()) != 0) {
      spdlog::warn("outbox: cannot mark {} committed: {}", path.string(), std::strerror(errno));
    }
  }
  m_staged.clear();
}

bool Outbox::has_prepared() const {
  if (m_kept) {
    return false; // the store's outbox has nothing to prepare; local files: settle_leftovers()
  }
  for (const auto& name : event_files(m_dir)) {
    if (name.ends_with(k_prepared)) {
      return true;
    }
  }
  return false;
}

// Events of the machine's own ledger from before it joined a fleet are not the shared ledger's to
// send (their records may not even be in it): said once per command, with what sends them.
void Outbox::warn_of_local_leftovers() const {
  // Per process: `events flush` has an outbox of its own beside the command's.
  static std::once_flag checked;
  std::call_once(checked, [&] {
    size_t left = 0;
    try {
      left = event_files(m_dir).size();
    } catch (const Error& e) {
      spdlog::debug("{}", e.what()); // an unreadable directory holds nothing this ledger sends
    }
    if (left > 0) {
      spdlog::warn("outbox: {} event(s) of this machine's local ledger wait in {} and are not sent "
                   "while the ledger is {}; 'sandboxer --ledger local events flush' sends them",
                   left, m_dir.string(), m_ledger->location());
    }
  });
}

std::vector<Outbox::Entry> Outbox::entries() const {
  // Each event's file (or the store's row) and its text.
  std::vector<std::pair<Entry, std::string>> found;
  if (m_kept) {
    warn_of_local_leftovers();
    for (auto& kept : m_kept->pending()) {
      Entry entry;
      entry.sequence = kept.sequence;
      found.emplace_back(std::move(entry), std::move(kept.text));
    }
  } else {
    for (const auto& name : event_files(m_dir)) {
      Entry entry;
      entry.file = m_dir / name;
      entry.prepared = name.ends_with(k_prepared);
      auto text = read_file_if_exists(entry.file);
      if (text) { // else delivered and removed by another process meanwhile
        found.emplace_back(std::move(entry), std::move(*text));
      }
    }
  }
  std::vector<Entry> entries;
  std::map<std::string, std::uint64_t> cursors;
  for (auto& [entry, text] : found) {
    try {
      auto doc = nlohmann::json::parse(text);
      entry.sequence = doc.at("sequence").get<std::uint64_t>();
      entry.event = std::move(doc.at("event"));
      entry.sinks = std::move(doc.at("sinks"));
    } catch (const nlohmann::json::exception& e) {
      spdlog::warn("outbox: {} is not an event ({}); left alone",
                   m_kept ? fmt::format("event {} of {}", entry.sequence, where())
                          : entry.file.string(),
                   e.what());
      continue;
    }
    for (const auto& [key, sink] : entry.sinks.items()) {
      auto it = cursors.find(key);
      if (it == cursors.end()) {
        it = cursors.emplace(key, cursor(key)).first;
      }
      if (it->second < entry.sequence) {
        entry.pending_sinks.push_back(key);
      }
    }
    entries.push_back(std::move(entry));
  }
  return entries;
}

std::uint64_t Outbox::cursor(const std::string& key) const {
  if (m_kept) {
    return m_kept->cursor(key);
  }
  auto text = read_file_if_exists(m_dir / "sinks" / (key + ".cursor"));
  if (!text) {
    return 0;
  }
  try {
    return std::stoull(*text);
  } catch (const std::exception&) {
    // A damaged cursor redelivers (at least once) rather than skip.
    spdlog::warn("outbox: cursor of sink {} is unreadable; delivering its events again", key);
    return 0;
  }
}

void Outbox::remove(const std::vector<const Entry*>& delivered) const {
  if (m_kept) {
    std::vector<std::uint64_t> sequences;
    for (const Entry* entry : delivered) {
      sequences.push_back(entry->sequence);
    }
    if (!sequences.empty()) {
      m_kept->remove(sequences);
    }
    return;
  }
  for (const Entry* entry : delivered) {
    ::unlink(entry->file.c_str());
  }
}

namespace {

// A lock file, held until this process ends at the latest: nothing to renew.
struct FileTurn : Outbox::SinkTurn {
  explicit FileTurn(fs::path cursor) : cursor_file(std::move(cursor)) {}
  bool renew(std::chrono::milliseconds) override { return true; }
  bool advance(std::uint64_t sequence, std::chrono::milliseconds) override {
    // Not fsync'd: a cursor lost with the machine only makes its sink get some events again.
    write_file_atomically(cursor_file, fmt::format("{}\n", sequence), 0600, false);
    return true;
  }
  fs::path cursor_file;
  LockFile::Guard held;
};

// The lease outlasts the send it covers by a margin, so that the turn never passes to another
// while its holder still sends.
Seconds lease_for(std::chrono::milliseconds longest) {
  return std::chrono::ceil<Seconds>(std::max(longest, std::chrono::milliseconds(0))) + Seconds(10);
}

struct KeptTurn : Outbox::SinkTurn {
  KeptTurn(const KeptEvents& outbox, std::string sink) : kept(outbox), key(std::move(sink)) {}
  ~KeptTurn() override {
    try {
      kept.release_sink(key);
    } catch (const std::exception& e) {
      spdlog::debug("outbox: sink {} is left to its lease: {}", key, e.what());
    }
  }
  bool renew(std::chrono::milliseconds longest) override {
    // An advance that moves nothing: only the holder renews, so a turn that passed to another
    // (and maybe back to nobody) is not taken again with a stale cursor.
    return kept.advance(key, 0, lease_for(longest));
  }
  bool advance(std::uint64_t sequence, std::chrono::milliseconds longest) override {
    return kept.advance(key, sequence, lease_for(longest));
  }
  const KeptEvents& kept;
  std::string key;
};

} // namespace

std::unique_ptr<Outbox::SinkTurn> Outbox::take_sink(const std::string& key,
                                                    std::chrono::milliseconds longest) const {
  if (m_kept) {
    return m_kept->take_sink(key, lease_for(longest)) ? std::make_unique<KeptTurn>(*m_kept, key)
                                                      : nullptr;
  }
  make_private_dirs(m_dir / "sinks");
  LockFile lock(m_dir / "sinks" / (key + ".lock"), Seconds(0), "event sink " + key);
  auto turn = std::make_unique<FileTurn>(m_dir / "sinks" / (key + ".cursor"));
  turn->held = lock.try_acquire();
  return turn->held.held() ? std::move(turn) : nullptr;
}

bool Outbox::sendable_here(const nlohmann::json& sink) const {
  return !sink.contains("host") || sink["host"] == m_host;
}

std::string Outbox::where() const {
  return m_kept ? fmt::format("the outbox of ledger {}", m_ledger->location()) : m_dir.string();
}

} // namespace sandboxer::events
