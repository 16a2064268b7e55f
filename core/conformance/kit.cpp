#include "core/conformance/kit.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <mutex>
#include <optional>
#include <spdlog/spdlog.h>
#include <thread>
#include <unistd.h>

#include <sandboxer/error.hpp>
#include <sandboxer/interrupt.hpp>
#include <sandboxer/ports.hpp>

#include "core/conformance/cp_tree.hpp"
#include "core/events/events.hpp"
#include "core/lifecycle/lifecycle.hpp"
#include "core/lifecycle/port_readiness.hpp"
#include "core/lifecycle/rules.hpp"
#include "sdk/file_descriptor.hpp"
#include "sdk/files.hpp"

namespace sandboxer::conformance {
namespace fs = std::filesystem;
using Outcome = Check::Outcome;
using json = nlohmann::json;

namespace {

constexpr const char* k_file = "sandboxer-conformance.txt";
constexpr const char* k_file_text = "written before the snapshot";
const Labels k_label = {{"conformance-check", "yes"}};

// A check that cannot go on: its outcome and why.
struct Stop {
  Outcome outcome;
  std::string detail;
};
[[noreturn]] void fail(const std::string& detail) {
  throw Stop{Outcome::fail, detail};
}
[[noreturn]] void skip(const std::string& detail) {
  throw Stop{Outcome::skip, detail};
}
void expect(bool ok, const std::string& detail) {
  if (!ok) {
    fail(detail);
  }
}

class CollectIo : public ExecIo {
public:
  explicit CollectIo(int stdin_fd = -1) : m_stdin(stdin_fd) {}
  void out(std::string_view bytes) override { out_text.append(bytes); }
  void err(std::string_view bytes) override { err_text.append(bytes); }
  int stdin_fd() const override { return m_stdin; }
  std::string out_text, err_text;

private:
  int m_stdin;
};

struct ExecResult {
  int code = -1;
  std::string out, err;
};

// A scratch directory removed at the end, with the kit's own ledger in it.
class ScratchDir {
public:
  ScratchDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern =
        fmt::format("{}/sandboxer-conformance-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw Error(ExitCode::runtime, fmt::format("cannot create {}: {}", pattern, strerror(errno)));
    }
    m_path = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(m_path, ec);
  }
  const fs::path& path() const { return m_path; }

private:
  fs::path m_path;
};

class Kit {
public:
  Kit(const Profile& profile, const DriverCatalog& drivers, const Clock& clock,
      const std::function<void(const Check&)>& on_check)
      : m_profile(profile), m_drivers(drivers), m_on_check(on_check),
        m_ledger(m_scratch.path() / "state", Seconds(30)),
        m_events(m_ledger, json::array(), {std::chrono::milliseconds(0), false}),
        m_engine(m_ledger, drivers, clock, m_events, "sandboxer drivers test") {
    // The kit's sandboxes tell no hub about themselves.
    m_profile.events = json::array();
    m_report.driver = profile.driver;
    m_report.profile = profile.name;
  }

  Report run() {
    check("handshake", [&] {
      m_factory = &m_drivers.find(m_profile.driver);
      m_caps = m_factory->capabilities();
      return fmt::format("snapshot {}, exec {}, native_ttl {}, list_by_label {}, logs {}",
                         m_caps.snapshot, m_caps.exec, m_caps.native_ttl, m_caps.list_by_label,
                         m_caps.logs);
    });
    if (!m_factory) {
      return m_report;
    }
    check("validate", [&] {
      m_spec = m_drivers.check_profile(m_profile);
      // parse_spec's output is what the ledger stores and what it is given back on every call.
      expect(m_factory->parse_spec(m_spec) == m_spec,
             "validating the normalized spec again changed it: it must be a fixed point");
      return "the profile's section is accepted and its normalized form is stable";
    });
    check("invalid spec", [&] { return invalid_spec(); });
    try {
      lifecycle();
    } catch (...) {
      cleanup();
      throw;
    }
    cleanup();
    return m_report;
  }

private:
  void lifecycle() {
    check("create", [&] {
      CreateOptions options;
      options.labels = k_label;
      if (m_caps.ports) {
        // The kit's sandbox exposes a port, for the ports check; a spec that cannot (a VM
        // without a network) is made without it, and that check says why it skipped.
        Profile exposing = m_profile;
        exposing.ports = {PortSpec{k_port}};
        try {
          m_record = m_engine.create(exposing, options).record;
        } catch (const Error& e) {
          if (e.code() != ExitCode::usage) {
            throw;
          }
          m_ports_refused = e.what();
        }
      }
      if (!m_record) {
        m_record = m_engine.create(m_profile, options).record;
      }
      expect(!m_record->backend_id.empty(), "create returned an empty backend id");
      m_ledger_id = m_ledger.read().ledger_id;
      return fmt::format("{} backend id {}", m_record->id, m_record->backend_id);
    });
    if (!m_record) {
      return;
    }
    m_opened = m_engine.open_driver(*m_record);
    check("labels carried", [&] { return labels_carried(); });
    check("ports", [&] { return ports(); });
    exec_checks();
    copy_checks();
    check("logs", [&] { return logs(); });
    check("pause and resume", [&] { return pause_resume(); });
    check("snapshot", [&] { return snapshot(); });
    check("restore", [&] { return restore(); });
    check("extend", [&] { return extend(); });
    check("run lease", [&] { return run_lease(); });
    check("list by label", [&] { return list_by_label(); });
    check("concurrent calls", [&] { return concurrent_calls(); });
    check("warm pool", [&] { return warm_pool(); });
    check("destroy", [&] { return destroy(); });
    check("destroy again", [&] {
      if (!m_destroyed) {
        skip("destroy did not pass");
      }
      try {
        m_opened.driver->destroy(lifecycle_rules::handle_of(*m_record));
      } catch (const DriverError& e) {
        // A built-in driver may say not_found, which the engine counts as destroyed.
        expect(e.kind() == DriverError::Kind::not_found,
               fmt::format("destroying it again failed: {}", e.what()));
        return "destroying it again says not_found, which counts as gone";
      }
      return "destroying it again succeeds";
    });
    check("unknown backend id", [&] { return unknown_id(); });
    check("nothing left behind", [&] { return leftovers(); });
  }

  std::string invalid_spec() {
    json bad = m_spec.is_object() ? m_spec : json::object();
    const std::string key = "sandboxer_conformance_no_such_key";
    bad[key] = true;
    try {
      m_factory->parse_spec(bad);
    } catch (const SpecError& e) {
      std::string text = std::string(e.what()) + " " + e.pointer();
      expect(text.find(key) != std::string::npos,
             fmt::format("the error does not name the unknown key: \"{}\"", e.what()));
      return fmt::format("an unknown key is refused: \"{}\"", e.what());
    } catch (const DriverError& e) {
      expect(e.kind() == DriverError::Kind::invalid_spec,
             fmt::format("an unknown key failed with a {} error instead of invalid_spec: {}",
                         to_string(e.kind()), e.what()));
      return fmt::format("an unknown key is refused: \"{}\"", e.what());
    }
    fail("a spec with an unknown key was accepted");
  }

  std::string labels_carried() {
    if (!m_caps.list_by_label) {
      skip("the driver cannot list by label");
    }
    auto found = m_opened.driver->list_remote({{"sandboxer.id", m_record->id}});
    expect(found.size() == 1, fmt::format("listing by label sandboxer.id={} found {} resources",
                                          m_record->id, found.size()));
    const auto& labels = found[0].labels;
    expect(found[0].backend_id == m_record->backend_id,
           fmt::format("the labelled resource is {}, not {}", found[0].backend_id,
                       m_record->backend_id));
    for (const auto& [key, value] : m_record->labels) {
      auto it = labels.find(key);
      expect(it != labels.end() && it->second == value,
             fmt::format("the resource lacks label {}={}", key, value));
    }
    expect(labels.count("sandboxer.ledger") && labels.at("sandboxer.ledger") == m_ledger_id,
           "the resource lacks label sandboxer.ledger");
    return fmt::format("{} labels, sandboxer.id and sandboxer.ledger included",
                       m_record->labels.size());
  }

  ExecResult exec(const std::string& id, ExecRequest request, const std::string& input = "") {
    int fds[2] = {-1, -1};
    if (request.attach_stdin && ::pipe2(fds, O_CLOEXEC) != 0) {
      throw Error(ExitCode::runtime, "cannot create a pipe");
    }
    FileDescriptor stdin_read(fds[0]);
    if (FileDescriptor stdin_write(fds[1]); stdin_write.get() >= 0) {
      // Small enough for the pipe's buffer: written at once, then EOF when it closes here.
      [[maybe_unused]] auto n = ::write(stdin_write.get(), input.data(), input.size());
    }
    CollectIo io(stdin_read.get());
    ExecResult result;
    result.code = m_engine.exec(id, request, io);
    result.out = std::move(io.out_text);
    result.err = std::move(io.err_text);
    return result;
  }

  ExecResult sh(const std::string& id, const std::string& script) {
    return exec(id, {.argv = {"sh", "-c", script}});
  }

  void exec_checks() {
    auto needs_exec = [&] {
      if (!m_caps.exec) {
        skip("the driver has no exec");
      }
    };
    check("exec stdout and stderr", [&] {
      needs_exec();
      auto r = sh(m_record->id, "printf to-stdout; printf to-stderr >&2");
      expect(r.out == "to-stdout" && r.err == "to-stderr",
             fmt::format("stdout \"{}\" and stderr \"{}\", expected \"to-stdout\" and "
                         "\"to-stderr\"",
                         r.out, r.err));
      return "each stream arrives apart";
    });
    check("exec exit codes", [&] {
      needs_exec();
      for (int code : {0, 1, 7, 42}) {
        auto r = sh(m_record->id, fmt::format("exit {}", code));
        expect(r.code == code, fmt::format("`exit {}` returned {}", code, r.code));
      }
      auto r = exec(m_record->id, {.argv = {"sandboxer-conformance-no-such-command"}});
      expect(r.code == 127, fmt::format("a missing command returned {}, expected 127", r.code));
      return "0, 1, 7, 42 come back as they are; a missing command is 127";
    });
    check("exec stdin", [&] {
      needs_exec();
      ExecResult r;
      try {
        r = exec(m_record->id, {.argv = {"cat"}, .attach_stdin = true}, "line one\nline two\n");
      } catch (const DriverError& e) {
        if (e.kind() == DriverError::Kind::unsupported) {
          skip(e.what());
        }
        throw;
      }
      expect(r.out == "line one\nline two\n" && r.code == 0,
             fmt::format("cat returned {} and printed \"{}\"", r.code, r.out));
      return "stdin reaches the command, and its end too";
    });
    check("exec env", [&] {
      needs_exec();
      auto r = exec(m_record->id, {.argv = {"sh", "-c", "printf %s \"$SANDBOXER_CONFORMANCE\""},
                                   .env = {{"SANDBOXER_CONFORMANCE", "a value with spaces"}}});
      expect(r.out == "a value with spaces", fmt::format("the variable read \"{}\"", r.out));
      return "variables reach the command";
    });
    check("exec workdir", [&] {
      needs_exec();
      auto r = exec(m_record->id, {.argv = {"sh", "-c", "pwd"}, .workdir = "/tmp"});
      std::string dir = r.out.substr(0, r.out.find_last_not_of('\n') + 1);
      // A backend without its own root (a directory on the host) may show a longer path.
      expect(r.code == 0 && dir.size() >= 4 && dir.compare(dir.size() - 4, 4, "/tmp") == 0,
             fmt::format("pwd in workdir /tmp printed \"{}\" (status {})", dir, r.code));
      return fmt::format("pwd printed {}", dir);
    });
    check("exec user", [&] {
      needs_exec();
      // Another user than the default, by uid, or by its usual name where the backend looks
      // users up by name only (e2b's envd): the command runs as it, or the core refuses before
      // any backend call (a driver without exec_user); never as the default user, silently.
      ExecResult r;
      try {
        r = exec(m_record->id, {.argv = {"id", "-u"}, .user = "65534"});
      } catch (const DriverError& e) {
        if (e.kind() == DriverError::Kind::unsupported && !m_caps.exec_user) {
          return fmt::format("refused, as the driver declares no exec_user: {}", e.what());
        }
        if (e.kind() != DriverError::Kind::invalid_spec || !m_caps.exec_user) {
          throw;
        }
        r = exec(m_record->id, {.argv = {"id", "-u"}, .user = "nobody"});
      }
      const std::string uid = r.out.substr(0, r.out.find_last_not_of("\r\n") + 1);
      expect(r.code == 0 && uid == "65534",
             fmt::format("id -u as user 65534 printed \"{}\" (status {})", uid, r.code));
      return std::string("the command ran as uid 65534");
    });
  }

  // sandboxer cp, the way the driver copies (its own, else tar over its exec) and, where it has
  // both, over exec too: every kind of entry comes back as it went in.
  void copy_checks() {
    check("cp round trip", [&] {
      if (!m_caps.copy && !m_caps.exec) {
        skip("the driver has neither a copy of its own nor exec");
      }
      return copy_round_trip(CopyRequest::Via::any, true);
    });
    check("cp over exec", [&] {
      if (!m_caps.exec) {
        skip("the driver has no exec");
      }
      try {
        return copy_round_trip(CopyRequest::Via::exec, false);
      } catch (const DriverError& e) {
        // An exec without stdin (e2b's envd) cannot carry the stream: as "exec stdin" does.
        if (e.kind() == DriverError::Kind::unsupported) {
          skip(e.what());
        }
        throw;
      }
    });
    check("cp of a missing path", [&] {
      if (!m_caps.copy && !m_caps.exec) {
        skip("the driver has neither a copy of its own nor exec");
      }
      CopyRequest request;
      request.direction = CopyRequest::Direction::out;
      request.sources = {"/sandboxer-conformance-no-such-path"};
      request.destination = (m_scratch.path() / "missing").string();
      try {
        m_engine.copy(m_record->id, request);
      } catch (const Error& e) {
        expect(e.code() == ExitCode::not_found,
               fmt::format("copying a missing path failed with exit {}, not 3: {}",
                           static_cast<int>(e.code()), e.what()));
        return fmt::format("not found (exit 3): {}", e.what());
      }
      fail("copying a missing path succeeded");
    });
  }

  std::string copy_round_trip(CopyRequest::Via via, bool large) {
    // Its own name each run: the stub's exec works on this machine's /tmp, and a name already
    // there would be copied into, not onto.
    const std::string name = fmt::format(
        "sandboxer-kit-{}-{}", via == CopyRequest::Via::exec ? "exec" : "any", m_record->id);
    const fs::path local = m_scratch.path() / ("cp-" + name);
    make_copy_tree(local / name, {.large = large});
    CopyRequest in;
    in.direction = CopyRequest::Direction::in;
    in.sources = {(local / name).string()};
    in.via = via;
    // Into /tmp where the sandbox has one, else its root.
    in.destination = "/tmp/" + name;
    cp::CopyResult went;
    try {
      went = m_engine.copy(m_record->id, in);
    } catch (const NotFoundError&) {
      in.destination = "/" + name;
      went = m_engine.copy(m_record->id, in);
    }
    const auto last = m_engine.get(m_record->id).history.back();
    expect(last.event == EventKind::files_copied &&
               last.details["copy"].value("outcome", "") == "complete",
           "the copy in left no complete files.copied entry in the history");
    CopyRequest out;
    out.direction = CopyRequest::Direction::out;
    out.sources = {in.destination};
    out.destination = (local / "back").string();
    out.via = via;
    cp::CopyResult came = m_engine.copy(m_record->id, out);
    if (auto difference = tree_difference(local / name, local / "back"); !difference.empty()) {
      fail(fmt::format("through {}: {}", went.via, difference));
    }
    std::map<std::string, std::string> sent;
    for (const auto& file : went.file_digests) {
      sent[file.path] = file.sha256;
    }
    std::map<std::string, std::string> received;
    for (const auto& file : came.file_digests) {
      received[file.path] = file.sha256;
    }
    expect(sent == received && !sent.empty(),
           "the files.copied digests of the copy in and the copy out differ");
    std::error_code ec;
    fs::remove_all(local, ec);
    if (m_caps.exec) {
      exec(m_record->id, {.argv = {"rm", "-rf", in.destination}});
    }
    return fmt::format("{} files, {} MiB in and out through {} ({:.1f} s in, {:.1f} s out); "
                       "bytes, modes, links, an empty file and directory, a 2001 mtime and a "
                       "UTF-8 name came back as they went",
                       went.files, went.bytes / (1024 * 1024), went.via, went.seconds,
                       came.seconds);
  }

  // The sandbox prints a marker on its console: the main process's stdout (/proc/1/fd/1: docker,
  // compose), the kernel's console (/dev/console: a VM's serial log), or the file a backend
  // without either names in $SANDBOXER_CONSOLE (stub). logs must then show it; the cloud's logs
  // may lag, so they are asked for up to 30 s.
  std::string logs() {
    struct Lines : LogSink {
      std::vector<LogLine> seen;
      void line(const LogLine& line) override { seen.push_back(line); }
    };
    if (!m_caps.logs) {
      Lines lines;
      try {
        m_engine.logs(m_record->id, {}, lines);
      } catch (const DriverError& e) {
        expect(e.kind() == DriverError::Kind::unsupported,
               fmt::format("logs without the capability failed with {} instead of unsupported: {}",
                           to_string(e.kind()), e.what()));
        return fmt::format("unsupported, as its capabilities say: {}", e.what());
      }
      fail("logs answered although the driver does not declare the capability");
    }
    if (!m_caps.exec) {
      Lines lines;
      m_engine.logs(m_record->id, {}, lines);
      return fmt::format("{} lines; without exec nothing could be printed to look for",
                         lines.seen.size());
    }
    const std::string marker = "sandboxer-conformance-logs-" + m_record->id;
    auto r = sh(m_record->id,
                fmt::format("for c in \"$SANDBOXER_CONSOLE\" /proc/1/fd/1 /dev/console; do "
                            "[ -n \"$c\" ] && printf '%s\\n' {} 2>/dev/null >>\"$c\" && exit 0; "
                            "done; exit 1",
                            marker));
    expect(r.code == 0, fmt::format("the sandbox could not print on its console (status {}): {}",
                                    r.code, r.err));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (;;) {
      Lines lines;
      m_engine.logs(m_record->id, {}, lines);
      for (const auto& line : lines.seen) {
        if (line.text.find(marker) != std::string::npos) {
          Lines last;
          m_engine.logs(m_record->id, {.tail = 1}, last);
          expect(last.seen.size() <= 1,
                 fmt::format("logs with tail 1 answered {} lines", last.seen.size()));
          return fmt::format("the printed marker came back on {} among {} lines; tail 1 gives "
                             "{}",
                             line.stream, lines.seen.size(), last.seen.size());
        }
      }
      expect(std::chrono::steady_clock::now() < deadline,
             fmt::format("the printed marker did not come back within 30 s ({} lines)",
                         lines.seen.size()));
      interrupt::sleep_for(std::chrono::seconds(1));
    }
  }

  // Pause and resume keep every byte (docs/pause.md): a file written before is there after, and
  // where the driver says memory was kept, a process started before still runs after (its
  // counter stood still while paused). Without the capability: refused (exit 7), nothing written.
  std::string pause_resume() {
    const std::string id = m_record->id;
    if (!m_caps.pause) {
      const size_t entries = m_engine.get(id).history.size();
      try {
        m_engine.pause(id);
      } catch (const Error& e) {
        expect(e.code() == ExitCode::policy,
               fmt::format("pause without the capability failed with exit {} instead of 7: {}",
                           static_cast<int>(e.code()), e.what()));
        expect(m_engine.get(id).history.size() == entries,
               "a refused pause wrote to the sandbox's history");
        return fmt::format("refused (exit 7), as its capabilities say: {}", e.what());
      }
      fail("pause succeeded although the driver does not declare the capability");
    }
    constexpr const char* k_pause_file = "sandboxer-kit-pause.txt";
    constexpr const char* k_ticks = "sandboxer-kit-ticks";
    const std::string text = "kept across the pause of " + id;
    // The counter is bounded (2 minutes) and killed at the end; its output goes nowhere, so
    // that the exec that starts it ends at once.
    auto ticks = [&]() -> long {
      auto r = sh(id, fmt::format("cat {} 2>/dev/null || echo 0", k_ticks));
      return std::strtol(r.out.c_str(), nullptr, 10);
    };
    if (m_caps.exec) {
      auto r = sh(id, fmt::format("printf '%s' '{}' > {} && (i=0; while [ $i -lt 600 ]; do "
                                  "i=$((i+1)); echo $i > {}; sleep 0.2; done) >/dev/null 2>&1 "
                                  "</dev/null & echo $! > {}.pid",
                                  text, k_pause_file, k_ticks, k_ticks));
      expect(r.code == 0, fmt::format("writing {} and starting a counter failed with {}: {}",
                                      k_pause_file, r.code, r.err));
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (ticks() < 2) {
        expect(std::chrono::steady_clock::now() < until,
               "the background counter did not count within 20 s");
        interrupt::sleep_for(std::chrono::milliseconds(200));
      }
    }
    const long before_pause = m_caps.exec ? ticks() : 0;
    const auto counted_from = std::chrono::steady_clock::now();
    PauseOutcome paused = m_engine.pause(id);
    const SandboxRecord& record = paused.record;
    expect(record.state == State::paused && record.pause && record.pause->at &&
               record.history.back().event == EventKind::paused,
           fmt::format("after pause the sandbox is {} (last entry {}), not paused with a paused "
                       "entry",
                       to_string(record.state), to_string(record.history.back().event)));
    const SandboxHandle handle = lifecycle_rules::handle_of(record);
    auto status = m_opened.driver->status(handle);
    expect(status.state == BackendStatus::State::paused ||
               status.state == BackendStatus::State::stopped,
           fmt::format("the backend says {} ({}) of the paused sandbox", to_string(status.state),
                       status.detail));
    if (m_caps.exec && !record.policy.resume_on_exec) {
      try {
        sh(id, "true");
        fail("exec in a paused sandbox succeeded");
      } catch (const Error& e) {
        expect(e.code() == ExitCode::conflict &&
                   std::string(e.what()).find("sandboxer resume") != std::string::npos,
               fmt::format("exec in a paused sandbox failed with exit {} without naming "
                           "'sandboxer resume': {}",
                           static_cast<int>(e.code()), e.what()));
      }
    }
    PauseRequest again;
    again.pause_id = record.pause->id;
    again.memory = record.policy.pause_memory;
    m_opened.driver->pause(handle, again); // a repeat (reap's repair) is done, not an error
    // Paused for at least this long: from pause's return (frozen) to resume's call.
    constexpr std::chrono::seconds k_paused_for{4};
    interrupt::sleep_for(k_paused_for);
    SandboxRecord resumed = m_engine.resume(id);
    m_record = resumed; // a resume may bring a new backend id (an emulated pause)
    // `resumed`, then `ports.exposed` when the ports moved.
    const bool entry = std::any_of(
        resumed.history.begin() + static_cast<std::ptrdiff_t>(record.history.size()),
        resumed.history.end(), [](const HistoryEntry& e) { return e.event == EventKind::resumed; });
    expect(resumed.state == State::running && !resumed.pause && entry,
           fmt::format("after resume the sandbox is {}, {} a resumed entry",
                       to_string(resumed.state), entry ? "with" : "without"));
    m_opened.driver->resume(lifecycle_rules::handle_of(resumed), {.pause_id = again.pause_id});
    std::string detail = fmt::format("{} ({}), then resumed", record.pause->how,
                                     record.pause->memory ? "memory kept" : "files only");
    if (!m_caps.exec) {
      return detail + "; without exec nothing inside could be checked";
    }
    auto r = sh(id, fmt::format("cat {}", k_pause_file));
    expect(r.out == text, fmt::format("{} reads \"{}\" after the resume (status {}), expected "
                                      "\"{}\"",
                                      k_pause_file, r.out, r.code, text));
    detail += fmt::format("; {} is intact", k_pause_file);
    if (record.pause->memory) {
      const long after_resume = ticks();
      // The counter ticks at most 5 times a second (it sleeps 0.2 s each time): frozen for
      // k_paused_for, it can have counted only over the rest of the time since it was read.
      const double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - counted_from).count();
      const long bound =
          static_cast<long>((elapsed - static_cast<double>(k_paused_for.count())) * 5) + 2;
      expect(after_resume - before_pause <= bound,
             fmt::format("the counter went from {} to {} in {:.1f} s with a {} s pause (at most "
                         "{} while it ran): it was not paused",
                         before_pause, after_resume, elapsed, k_paused_for.count(), bound));
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (ticks() <= after_resume) {
        expect(std::chrono::steady_clock::now() < until,
               fmt::format("the counter started before the pause stands at {} after the resume: "
                           "the process did not survive although the driver kept memory",
                           after_resume));
        interrupt::sleep_for(std::chrono::milliseconds(200));
      }
      detail += fmt::format("; a counter started before it stood still ({} -> {}) and counts on",
                            before_pause, after_resume);
    }
    sh(id, fmt::format("kill $(cat {0}.pid) 2>/dev/null; rm -f {0} {0}.pid {1}", k_ticks,
                       k_pause_file));
    return detail;
  }

  std::string snapshot() {
    if (!m_caps.snapshot) {
      skip("the driver has no snapshot");
    }
    if (m_caps.exec) {
      auto r = sh(m_record->id, fmt::format("printf '{}' > {}", k_file_text, k_file));
      expect(r.code == 0, fmt::format("writing {} failed with {}: {}", k_file, r.code, r.err));
    }
    auto record = m_engine.snapshot(m_record->id, std::string("conformance"));
    expect(!record.snapshots.empty(), "no snapshot was recorded");
    m_snapshot = record.snapshots.back().id;
    expect(!record.snapshots.back().backend_ref.empty(), "the snapshot's backend_ref is empty");
    return fmt::format("{} backend ref {}", *m_snapshot, record.snapshots.back().backend_ref);
  }

  std::string restore() {
    if (!m_snapshot) {
      skip(m_caps.snapshot ? "snapshot did not pass" : "the driver has no snapshot");
    }
    CreateOptions options;
    options.labels = k_label;
    auto restored = m_engine.restore(*m_snapshot, options).record;
    std::string detail = fmt::format("{} from {}", restored.id, *m_snapshot);
    if (m_caps.exec) {
      auto r = exec(restored.id, {.argv = {"cat", k_file}});
      if (r.out != k_file_text) {
        m_engine.destroy(restored.id, "conformance kit");
        fail(fmt::format("{} in the restored sandbox reads \"{}\" (status {}), expected \"{}\"",
                         k_file, r.out, r.code, k_file_text));
      }
      detail += fmt::format(", {} is there", k_file);
    }
    m_engine.destroy(restored.id, "conformance kit");
    return detail;
  }

  std::string extend() {
    auto before = m_engine.get(m_record->id).expires_at;
    auto outcome = m_engine.extend(m_record->id, {.by = Seconds(600)});
    auto after = outcome.record.expires_at;
    expect(before && after && *after > *before, "the deadline did not move");
    return m_caps.native_ttl ? "the backend's deadline moved with the ledger's"
                             : "the ledger's deadline moved (the driver keeps no deadline)";
  }

  // `sandboxer run`'s lease (docs/run.md) on this driver: held and renewed past its first
  // deadline, the sandbox still runs (the backend was told the TTL, not the lease); extend moves
  // the TTL that caps it; the renewals wrote no history entry, and the release one.
  std::string run_lease() {
    constexpr Seconds k_lease{2};
    const size_t entries = m_engine.take_lease(m_record->id, k_lease).history.size();
    const auto until = std::chrono::steady_clock::now() + k_lease + std::chrono::seconds(1);
    int renewals = 0;
    while (std::chrono::steady_clock::now() < until) {
      TimePoint deadline = m_engine.renew_lease(m_record->id);
      ++renewals;
      expect(deadline <= std::chrono::system_clock::now() + k_lease + Seconds(1),
             fmt::format("a renewal set the deadline to {}, past the 2s lease",
                         format_time(deadline)));
      interrupt::sleep_for(std::chrono::milliseconds(400));
    }
    auto status = m_opened.driver->status(lifecycle_rules::handle_of(*m_record));
    expect(status.state == BackendStatus::State::running ||
               status.state == BackendStatus::State::unknown,
           fmt::format("the sandbox is {} once its first lease deadline passed: the backend was "
                       "given the lease, not the TTL",
                       to_string(status.state)));
    auto held = m_engine.get(m_record->id);
    expect(held.lease && held.lease->ttl_expires_at, "the held sandbox's lease has no TTL cap");
    const TimePoint cap = *held.lease->ttl_expires_at;
    auto extended = m_engine.extend(m_record->id, {.by = Seconds(60)});
    const auto& moved = extended.record.lease;
    expect(moved && moved->ttl_expires_at && *moved->ttl_expires_at > cap &&
               extended.record.expires_at == held.expires_at,
           "extend of a leased sandbox did not move the TTL that caps the lease (alone)");
    auto released = m_engine.release_lease(m_record->id, "released");
    expect(!released.lease && released.expires_at == extended.record.lease->ttl_expires_at,
           "releasing the lease did not give the TTL's deadline back");
    expect(released.history.size() == entries + 2 &&
               released.history.back().event == EventKind::lease_ended &&
               released.history.back().details["lease"].value("renewals", -1) == renewals,
           fmt::format("{} renewals, extend and release wrote {} history entries, not 2 "
                       "(extended, lease.ended with the renewals)",
                       renewals, released.history.size() - entries));
    return fmt::format("held by a 2s lease for 3s ({} renewals, no entry), the backend still "
                       "{}; extend moved the TTL cap; released in one lease.ended entry",
                       renewals, to_string(status.state));
  }

  // A warm pool of one (docs/pools.md): a member made ahead through the driver's own create, that
  // the backend runs while it waits, claimed by a create whose history proves it was never used,
  // and working once handed over. The driver needs nothing of its own for it.
  std::string warm_pool() {
    Profile pooled = m_profile;
    pooled.name = m_profile.name + "-kit-pool";
    pooled.pool = PoolPolicy{1, Seconds(3600)};
    const auto fill_started = std::chrono::steady_clock::now();
    PoolFill fill = m_engine.fill_pool(pooled);
    const auto fill_ms = elapsed_ms(fill_started);
    expect(fill.made == 1 && fill.errors.empty(),
           fmt::format("pool fill of a pool of 1 made {} member(s){}", fill.made,
                       fill.errors.empty() ? "" : ": " + fill.errors.front()));
    std::optional<SandboxRecord> member;
    for (auto& record : m_ledger.read().sandboxes) {
      if (record.state == State::pooled && record.pool && record.pool->key == fill.pool) {
        member = std::move(record);
      }
    }
    expect(member.has_value(), "no member is pooled after the fill");
    auto status = m_opened.driver->status(lifecycle_rules::handle_of(*member));
    expect(status.state == BackendStatus::State::running,
           fmt::format("the backend says the waiting member is {} ({})", to_string(status.state),
                       status.detail));
    CreateOptions options;
    options.labels = k_label;
    const auto claim_started = std::chrono::steady_clock::now();
    SandboxRecord claimed = m_engine.create(pooled, options).record;
    const auto claim_ms = elapsed_ms(claim_started);
    expect(claimed.id == member->id,
           fmt::format("create made {} instead of claiming the ready member {}", claimed.id,
                       member->id));
    std::string events;
    for (const auto& entry : claimed.history) {
      events += (events.empty() ? "" : " ") + std::string(to_string(entry.event));
    }
    expect(events == "created pooled claimed",
           fmt::format("the claimed member's history is \"{}\", not \"created pooled claimed\"",
                       events));
    if (m_caps.exec) {
      auto r = sh(claimed.id, "true");
      expect(r.code == 0, fmt::format("exec in the claimed member exited {}: {}", r.code, r.err));
    }
    m_engine.destroy(claimed.id, "conformance kit: warm pool");
    return fmt::format("member made ahead in {} ms, claimed by create in {} ms (created, pooled, "
                       "claimed){}, destroyed",
                       fill_ms, claim_ms, m_caps.exec ? ", exec works" : "");
  }

  static long elapsed_ms(std::chrono::steady_clock::time_point since) {
    return static_cast<long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::steady_clock::now() - since)
                                 .count());
  }

  std::string list_by_label() {
    if (!m_caps.list_by_label) {
      skip("the driver cannot list by label");
    }
    auto found = m_opened.driver->list_remote({{"sandboxer.ledger", m_ledger_id}});
    bool seen = false;
    for (const auto& resource : found) {
      seen = seen || resource.backend_id == m_record->backend_id;
    }
    expect(seen, fmt::format("listing by sandboxer.ledger={} does not show {}", m_ledger_id,
                             m_record->backend_id));
    auto none = m_opened.driver->list_remote(
        {{"sandboxer.ledger", m_ledger_id}, {"conformance-check", "no-such-value"}});
    expect(none.empty(), fmt::format("a selector no resource matches found {}", none.size()));
    return fmt::format("{} resource(s) of this ledger; a selector matching none finds none",
                       found.size());
  }

  // Several callers at once, as `reap --parallel` and a Ctrl-C's cleanup are: each with its own
  // opened driver, each making the calls the driver supports, all within one deadline. A driver
  // that deadlocks or serializes on a lock fails here instead of hanging a reaper.
  std::string concurrent_calls() {
    constexpr int k_callers = 4;
    constexpr auto k_deadline = std::chrono::seconds(120);
    struct Shared {
      std::mutex mutex;
      std::condition_variable done;
      int finished = 0;
      std::vector<std::string> errors;
    };
    auto shared = std::make_shared<Shared>();
    const SandboxHandle handle = lifecycle_rules::handle_of(*m_record);
    const Capabilities caps = m_caps;
    for (int i = 0; i < k_callers; ++i) {
      // Opened here, moved into the caller: a caller still stuck at the deadline touches nothing
      // of the kit's.
      std::shared_ptr<Driver> driver = m_engine.open_driver(*m_record).driver;
      std::thread([shared, driver, handle, caps, labels = Labels{{"sandboxer.id", m_record->id}}] {
        std::string error;
        try {
          driver->status(handle);
          if (caps.exec) {
            CollectIo io;
            const int code = driver->exec(handle, {.argv = {"true"}}, io);
            if (code != 0) {
              error = fmt::format("exec true exited {}", code);
            }
          }
          if (caps.list_by_label && driver->list_remote(labels).size() != 1) {
            error = "listing by sandboxer.id did not find the one resource";
          }
        } catch (const std::exception& e) {
          error = e.what();
        }
        std::lock_guard lock(shared->mutex);
        if (!error.empty()) {
          shared->errors.push_back(error);
        }
        ++shared->finished;
        shared->done.notify_all();
      }).detach();
    }
    std::unique_lock lock(shared->mutex);
    const bool all =
        shared->done.wait_for(lock, k_deadline, [&] { return shared->finished == k_callers; });
    expect(all, fmt::format("{} of {} concurrent callers did not finish within {} s: the driver "
                            "deadlocks or waits on itself",
                            k_callers - shared->finished, k_callers, k_deadline.count()));
    if (!shared->errors.empty()) {
      fail(fmt::format("a concurrent caller failed: {}", shared->errors.front()));
    }
    return fmt::format("{} callers at once (status{}{}) all answered", k_callers,
                       caps.exec ? ", exec" : "", caps.list_by_label ? ", list" : "");
  }

  std::string destroy() {
    m_engine.destroy(m_record->id, "conformance kit");
    m_destroyed = true;
    if (m_caps.list_by_label) {
      auto found = m_opened.driver->list_remote({{"sandboxer.id", m_record->id}});
      expect(found.empty(), fmt::format("{} is still listed after destroy", m_record->backend_id));
      return "the resource is gone from the backend's list";
    }
    auto status = m_opened.driver->status(lifecycle_rules::handle_of(*m_record));
    if (status.state == BackendStatus::State::unknown) {
      return "destroyed (the driver reports no status to confirm it is gone)";
    }
    expect(status.state == BackendStatus::State::missing,
           fmt::format("the backend still reports it {}", to_string(status.state)));
    return "the backend reports it missing";
  }

  std::string unknown_id() {
    SandboxHandle handle = lifecycle_rules::handle_of(*m_record);
    handle.backend_id = m_record->backend_id + "-sandboxer-conformance-missing";
    try {
      if (m_caps.exec) {
        CollectIo io;
        m_opened.driver->exec(handle, {.argv = {"true"}}, io);
        fail("exec on an unknown backend id succeeded");
      }
      auto status = m_opened.driver->status(handle);
      if (status.state == BackendStatus::State::unknown) {
        skip("the driver has no exec and reports no status");
      }
      expect(status.state == BackendStatus::State::missing,
             fmt::format("status of an unknown backend id is {}", to_string(status.state)));
      return std::string("status says missing");
    } catch (const DriverError& e) {
      expect(e.kind() == DriverError::Kind::not_found,
             fmt::format("an unknown backend id gave a {} error, expected not_found: {}",
                         to_string(e.kind()), e.what()));
      return fmt::format("not_found: {}", e.what());
    }
  }

  // A driver with the ports capability reports one binding for the port asked, where a client
  // connects; with exec, a listener started in the sandbox answers there (Driver::port_answers,
  // where `ready: {port}` and `forward` connect), and after destroy a port on this machine is
  // free again (checked in "nothing left behind"). Without the capability, a profile with ports
  // is refused before anything is made.
  std::string ports() {
    if (!m_caps.ports) {
      Profile exposing = m_profile;
      exposing.ports = {PortSpec{k_port}};
      const size_t before = m_ledger.read().sandboxes.size();
      try {
        auto made = m_engine.create(exposing, {});
        m_engine.destroy(made.record.id, "conformance kit", {.force = true});
      } catch (const Error& e) {
        expect(e.code() == ExitCode::backend && m_ledger.read().sandboxes.size() == before,
               fmt::format("a profile with ports: was not refused before anything was made "
                           "(exit {}): {}",
                           static_cast<int>(e.code()), e.what()));
        return fmt::format("refused before anything is made, as its capabilities say: {}",
                           e.what());
      }
      fail("a profile with ports: was accepted although the driver has no ports");
    }
    if (m_ports_refused) {
      skip(fmt::format("this profile's spec cannot expose ports: {}", *m_ports_refused));
    }
    expect(!m_record->ports.empty(), "create reported no binding for the port asked");
    const PortBinding& binding = m_record->ports.front();
    expect(binding.port == k_port && binding.protocol == "tcp" && !binding.url.empty() &&
               !binding.host.empty(),
           fmt::format("the first binding is {}/{} at \"{}\", expected {}/tcp with a url",
                       binding.port, binding.protocol, binding.url, k_port));
    const bool here = m_caps.port_reach == Capabilities::PortReach::this_machine;
    expect(!here || binding.host_port.has_value(),
           "a port on this machine was reported without its host port");
    if (!m_caps.exec) {
      return fmt::format("{} reported; without exec nothing could listen on it", binding.url);
    }
    if (m_caps.port_reach == Capabilities::PortReach::public_url) {
      ForwardPlan plan = m_engine.plan_forward(m_record->id, {{k_port, "tcp", std::nullopt}});
      expect(plan.ports.size() == 1 && plan.ports.front().binding.url == binding.url,
             "forward does not plan to print the port's URL");
      return fmt::format("{} reported, and forward prints it (a public URL, not probed from "
                         "here)",
                         binding.url);
    }
    // A listener of bounded life, stopped again by the kit: on a driver that isolates nothing
    // (the stub), it would otherwise outlive the sandbox on this machine.
    auto r = sh(m_record->id,
                fmt::format("t=; command -v timeout >/dev/null && t='timeout 120'; "
                            "start() {{ $t \"$@\" >/dev/null 2>&1 & p=$!; sleep 0.5; "
                            "kill -0 $p 2>/dev/null && echo $p && exit 0; }}; "
                            "start busybox httpd -f -p {0} -h /; start httpd -f -p {0} -h /; "
                            "start python3 -m http.server {0}; exit 1",
                            k_port));
    if (r.code != 0) {
      return fmt::format("{} reported; the sandbox has no httpd or python3 to listen with",
                         binding.url);
    }
    const std::string listener = r.out.substr(0, r.out.find('\n'));
    const bool answered =
        wait_for_port(*m_opened.driver, lifecycle_rules::handle_of(*m_record), binding, Seconds(20))
            .answered;
    std::string forwarded;
    try {
      if (answered) {
        forwarded = forward_reaches(binding);
      }
    } catch (...) {
      exec(m_record->id, {.argv = {"kill", listener}});
      throw;
    }
    exec(m_record->id, {.argv = {"kill", listener}});
    expect(answered,
           fmt::format("a listener on port {} in the sandbox did not answer at {} within 20 s",
                       k_port, binding.url));
    if (here) {
      m_port_on_this_machine = binding;
    }
    return fmt::format("a listener on port {} in the sandbox answers at {}; {}", k_port,
                       binding.url, forwarded);
  }

  // `sandboxer forward` of the port to a free local one, as the verb runs it: the listener is
  // reached through 127.0.0.1, and the forward's start and end are in the history.
  std::string forward_reaches(const PortBinding& binding) {
    ForwardPlan plan = m_engine.plan_forward(m_record->id, {{k_port, "tcp", 0}});
    expect(plan.ports.size() == 1 && plan.ports.front().binding.url == binding.url,
           fmt::format("forward planned another way to port {} than {}", k_port, binding.url));
    struct Probe : ForwardIo {
      std::atomic<bool> up{false}, done{false};
      void listening(const PortForward&) override { up = true; }
      void notice(std::string_view) override {}
      bool keep_going() override { return !done; }
    } probe;
    std::exception_ptr failed;
    std::thread running([&] {
      try {
        m_engine.forward(plan, probe);
      } catch (...) {
        failed = std::current_exception();
      }
    });
    const int local = plan.ports.front().local_port;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!probe.up && !failed && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    const bool reached = probe.up && tcp_answers("127.0.0.1", local, std::chrono::seconds(2));
    probe.done = true;
    running.join();
    if (failed) {
      std::rethrow_exception(failed);
    }
    expect(probe.up, "forward did not listen within 20 s");
    expect(reached, fmt::format("forward listens on 127.0.0.1:{}, but the port's listener is not "
                                "reached through it",
                                local));
    std::vector<std::string> entries;
    for (const auto& entry : m_engine.get(m_record->id).history) {
      if (entry.event == EventKind::ports_forwarded ||
          entry.event == EventKind::ports_forward_ended) {
        entries.push_back(to_string(entry.event));
      }
    }
    expect(entries == std::vector<std::string>{"ports.forwarded", "ports.forward_ended"},
           fmt::format("the forward's history entries are [{}]", fmt::join(entries, ", ")));
    return fmt::format("forward reaches it at 127.0.0.1:{} ({})", local,
                       plan.reach == Capabilities::PortReach::through_driver ? "through the driver"
                                                                             : "relayed here");
  }

  std::string leftovers() {
    if (m_port_on_this_machine) {
      const auto& binding = *m_port_on_this_machine;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (tcp_answers(binding.host, binding.host_port.value_or(0),
                         std::chrono::milliseconds(500))) {
        expect(std::chrono::steady_clock::now() < deadline,
               fmt::format("{} still answers after destroy", binding.url));
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
    }
    if (!m_caps.list_by_label) {
      skip("the driver cannot list by label");
    }
    auto found = m_opened.driver->list_remote({{"sandboxer.ledger", m_ledger_id}});
    std::string ids;
    for (const auto& resource : found) {
      ids += (ids.empty() ? "" : ", ") + resource.backend_id;
    }
    expect(found.empty(), fmt::format("the backend still has {} resource(s) of the kit's "
                                      "sandboxes: {}",
                                      found.size(), ids));
    return "the backend holds nothing of the kit's sandboxes";
  }

  // Whatever the checks left: every live sandbox of the kit's ledger, then its snapshots.
  void cleanup() {
    try {
      for (const auto& record : m_ledger.read().sandboxes) {
        for (const auto& snap : record.snapshots) {
          try {
            m_engine.delete_snapshot(snap.id);
          } catch (const std::exception& e) {
            spdlog::warn("conformance kit: snapshot {}: {}", snap.id, e.what());
          }
        }
        if (record.state != State::destroyed && record.state != State::failed) {
          try {
            m_engine.destroy(record.id, "conformance kit cleanup", {.force = true, .forget = true});
          } catch (const std::exception& e) {
            spdlog::warn("conformance kit: {}: {}", record.id, e.what());
          }
        }
      }
    } catch (const std::exception& e) {
      spdlog::warn("conformance kit: cleanup: {}", e.what());
    }
  }

  template <typename F> void check(const std::string& name, F&& body) {
    Check check{name};
    auto started = std::chrono::steady_clock::now();
    try {
      check.detail = body();
    } catch (const Stop& stop) {
      check.outcome = stop.outcome;
      check.detail = stop.detail;
    } catch (const Interrupted&) {
      throw;
    } catch (const std::exception& e) {
      check.outcome = Outcome::fail;
      check.detail = e.what();
    }
    check.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started)
                   .count();
    if (m_on_check) {
      m_on_check(check);
    }
    m_report.checks.push_back(std::move(check));
  }

  Profile m_profile;
  const DriverCatalog& m_drivers;
  std::function<void(const Check&)> m_on_check;
  ScratchDir m_scratch;
  Ledger m_ledger;
  events::Publisher m_events;
  Engine m_engine;
  Report m_report;
  const DriverFactory* m_factory = nullptr;
  Capabilities m_caps;
  json m_spec;
  std::optional<SandboxRecord> m_record;
  Engine::Opened m_opened;
  std::string m_ledger_id;
  std::optional<std::string> m_snapshot;
  bool m_destroyed = false;
  std::optional<std::string> m_ports_refused;
  std::optional<PortBinding> m_port_on_this_machine;
  static constexpr int k_port = 8080;
};

} // namespace

const char* to_string(Check::Outcome outcome) {
  switch (outcome) {
  case Outcome::pass:
    return "pass";
  case Outcome::fail:
    return "fail";
  case Outcome::skip:
    return "skip";
  }
  return "?";
}

int Report::count(Check::Outcome outcome) const {
  int n = 0;
  for (const auto& check : checks) {
    n += check.outcome == outcome ? 1 : 0;
  }
  return n;
}

json Report::to_json() const {
  json items = json::array();
  for (const auto& check : checks) {
    items.push_back({{"name", check.name},
                     {"result", to_string(check.outcome)},
                     {"detail", check.detail},
                     {"duration_ms", static_cast<std::int64_t>(check.ms)}});
  }
  return {{"driver", driver},
          {"profile", profile},
          {"passed", count(Outcome::pass)},
          {"failed", count(Outcome::fail)},
          {"skipped", count(Outcome::skip)},
          {"checks", items}};
}

Report run(const Profile& profile, const DriverCatalog& drivers, const Clock& clock,
           const std::function<void(const Check&)>& on_check) {
  return Kit(profile, drivers, clock, on_check).run();
}

} // namespace sandboxer::conformance
