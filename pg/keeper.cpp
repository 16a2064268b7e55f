#include "pg/keeper.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <fmt/format.h>
#include <fstream>
#include <list>
#include <map>
#include <mutex>
#include <poll.h>
#include <random>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include <sandboxer/error.hpp>
#include <sandboxer/interrupt.hpp>
#include <sandboxer/log.hpp>
#include <sandboxer/proc.hpp>

#include "core/sha256.hpp"
#include "pg/keeper_wire.hpp"
#include "pg/libpq_connection.hpp"
#include "sdk/file_descriptor.hpp"

extern char** environ;

namespace sandboxer::ledger::pg {
namespace {

using SteadyClock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// Idle connections kept for the next commands; more at once (a reap's workers) are closed when
// their command ends.
constexpr std::size_t k_pooled = 8;

long long now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             SteadyClock::now().time_since_epoch())
      .count();
}

struct Pool {
  std::mutex mutex;
  std::vector<std::unique_ptr<LibpqConnection>> idle;
  std::atomic<int> clients = 0;
  std::atomic<long long> last_used = now_ms();
  std::atomic<bool> stopping = false; // the keeper leaves: sessions end at their next wait
  ConnectOptions options;

  std::unique_ptr<LibpqConnection> take() {
    std::lock_guard lock(mutex);
    while (!idle.empty()) {
      auto connection = std::move(idle.back());
      idle.pop_back();
      if (!connection->broken_while_idle()) {
        return connection;
      }
    }
    return nullptr;
  }

  void give_back(std::unique_ptr<LibpqConnection> connection) {
    if (!connection) {
      return;
    }
    connection->watch(-1); // its client is gone: nothing to watch while it rolls back
    if (!connection->reusable()) {
      // A command that ended inside a transaction (killed, or it failed): the keeper ends it
      // as the server would have for a command's own connection.
      try {
        connection->run_script("ROLLBACK", 2s);
      } catch (const std::exception&) {
        return;
      }
      if (!connection->reusable()) {
        return;
      }
    }
    std::lock_guard lock(mutex);
    if (idle.size() < k_pooled) {
      idle.push_back(std::move(connection));
    }
  }
};

// Waits until `fd` is readable; false when the keeper stops meanwhile.
bool wait_readable(const Pool& pool, int fd) {
  while (!pool.stopping && !interrupt::requested()) {
    pollfd fds[2] = {{fd, POLLIN, 0}, {interrupt::wake_fd(), POLLIN, 0}};
    if (::poll(fds, 2, 1000) < 0 && errno != EINTR) {
      return false;
    }
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      return true;
    }
  }
  return false;
}

// Appends `size` bytes from the client to `out`, as they come (a length announced is not
// allocated before its bytes arrive); false at the client's end of stream or error, or when the
// keeper stops.
bool read_exact(const Pool& pool, int fd, std::string& out, std::size_t size) {
  char buffer[65536];
  while (size > 0) {
    if (!wait_readable(pool, fd)) {
      return false;
    }
    const ssize_t got = ::recv(fd, buffer, std::min(sizeof buffer, size), MSG_DONTWAIT);
    if (got <= 0) {
      if (got < 0 && (errno == EINTR || errno == EAGAIN)) {
        continue;
      }
      return false;
    }
    out.append(buffer, static_cast<std::size_t>(got));
    size -= static_cast<std::size_t>(got);
  }
  return true;
}

// Sends all of `data` within `deadline`; false when the client is gone or stopped reading.
bool write_all(int fd, std::string_view data, SteadyClock::time_point deadline) {
  while (!data.empty()) {
    const ssize_t sent = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent > 0) {
      data.remove_prefix(static_cast<std::size_t>(sent));
      continue;
    }
    if (sent < 0 && errno != EAGAIN && errno != EINTR) {
      return false;
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
    pollfd pfd = {fd, POLLOUT, 0};
    if (left.count() <= 0 || ::poll(&pfd, 1, static_cast<int>(left.count())) == 0) {
      return false;
    }
  }
  return true;
}

wire::Reply answer(LibpqConnection& connection, const wire::Request& request) {
  wire::Reply reply;
  switch (request.call) {
  case wire::Call::query:
    reply.results.push_back(
        connection.query(request.statements[0].sql, request.statements[0].params, request.timeout));
    break;
  case wire::Call::script:
    reply.results.push_back(connection.run_script(request.statements[0].sql, request.timeout));
    break;
  case wire::Call::pipeline:
    reply.results = connection.pipeline(request.statements, request.timeout);
    break;
  case wire::Call::server_version: {
    Rows rows;
    rows.columns = {"server_version"};
    rows.values.push_back({std::to_string(connection.server_version())});
    reply.results.push_back(std::move(rows));
    break;
  }
  }
  return reply;
}

wire::Reply failure_reply(Failure failure, std::string sqlstate, std::string message) {
  wire::Reply reply;
  reply.failed = true;
  reply.failure = failure;
  reply.sqlstate = std::move(sqlstate);
  reply.message = std::move(message);
  return reply;
}

// One command's session: its requests run in turn on one database connection, held from its
// first request until it hangs up, so that its transactions stay whole.
void serve_client(Pool& pool, int fd) {
  // The greeting a command waits for before it relies on this keeper: a keeper that accepted
  // but stalls, or that is closing, is passed over for a connection of the command's own.
  const char hello = static_cast<char>(wire::k_version);
  if (!write_all(fd, std::string_view(&hello, 1), SteadyClock::now() + 1s)) {
    return;
  }
  std::unique_ptr<LibpqConnection> connection;
  bool lost = false; // its database connection broke: so does the session, as it would direct
  while (true) {
    std::string prefix;
    std::string body;
    try {
      if (!read_exact(pool, fd, prefix, 4)) {
        break;
      }
      const std::uint32_t length = wire::frame_length(prefix.data());
      if (length > wire::k_max_request) {
        throw wire::WireError(fmt::format("a request of {} bytes", length));
      }
      if (!read_exact(pool, fd, body, length)) {
        break;
      }
    } catch (const wire::WireError& e) {
      spdlog::warn("keeper: a client sent a damaged frame ({}); its session ends", e.what());
      break;
    }
    pool.last_used = now_ms();
    std::string out;
    try {
      wire::Reply reply;
      try {
        const wire::Request request = wire::decode_request(body);
        if (lost) {
          throw PgError(Failure::connection_lost, "",
                        fmt::format("ledger {}: the connection was lost", pool.options.where));
        }
        if (!connection) {
          connection = pool.take();
        }
        if (!connection) {
          connection = std::make_unique<LibpqConnection>(pool.options);
        }
        connection->watch(fd);
        reply = answer(*connection, request);
      } catch (const PgError& e) {
        reply = failure_reply(e.failure(), e.sqlstate(), e.what());
        if (e.failure() == Failure::connection_lost || e.failure() == Failure::unavailable) {
          connection.reset();
          lost = true;
        }
      }
      out = wire::frame(wire::encode(reply));
    } catch (const wire::WireError& e) {
      spdlog::warn("keeper: a request or its answer does not fit the wire ({}); the session ends",
                   e.what());
      break;
    } catch (const Interrupted&) {
      break; // the keeper stops: the client sees its session end, as a dropped connection
    }
    if (!write_all(fd, out, SteadyClock::now() + 30s)) {
      break;
    }
    pool.last_used = now_ms();
  }
  pool.give_back(std::move(connection));
}

bool same_user(int fd) {
  ucred peer{};
  socklen_t size = sizeof peer;
  return ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &size) == 0 && peer.uid == ::geteuid();
}

// Which file is at `path` (device and inode), or {0, 0}.
std::pair<dev_t, ino_t> identity_of(const std::filesystem::path& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    return {0, 0};
  }
  return {st.st_dev, st.st_ino};
}

// The keepers' directory, made 0700 and checked to be this user's alone.
bool private_directory(const std::filesystem::path& dir, bool make) {
  if (make) {
    std::error_code ignored;
    std::filesystem::create_directories(dir, ignored);
    ::chmod(dir.c_str(), 0700);
  }
  struct stat st {};
  return ::lstat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == ::geteuid() &&
         (st.st_mode & 077) == 0;
}

// The directory's random salt, made by the first that needs it (whole or not at all: written
// aside and linked into place).
std::optional<std::string> salt_of(const std::filesystem::path& dir, bool make) {
  const auto path = dir / "salt";
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::ifstream in(path);
    std::string salt;
    if (in && std::getline(in, salt) && salt.size() == 64) {
      return salt;
    }
    if (!make) {
      return std::nullopt;
    }
    std::random_device random;
    std::string fresh;
    for (int i = 0; i < 8; ++i) {
      fresh += fmt::format("{:08x}", random());
    }
    const auto aside = dir / fmt::format("salt.{}", ::getpid());
    {
      std::ofstream out(aside, std::ios::trunc);
      out << fresh << '\n';
      if (!out.flush()) {
        return std::nullopt;
      }
    }
    ::chmod(aside.c_str(), 0600);
    ::link(aside.c_str(), path.c_str()); // EEXIST: another's came first, read that one
    ::unlink(aside.c_str());
  }
  return std::nullopt;
}

// The environment a keeper starts with: the command's, with the ledger's URI given as
// $SANDBOXER_LEDGER rather than in its arguments (which `ps` shows every user).
std::map<std::string, std::string> keeper_environment(const std::string& url) {
  return {{"SANDBOXER_LEDGER", url}, {k_started_keeper_variable, "1"}};
}

// A file that says a keeper is being started at `socket`: made by the command that starts it,
// removed by the keeper once it listens (or gives up).
std::string start_marker(const std::filesystem::path& socket) {
  return socket.native() + ".starting";
}

// Whether this command is the one to start a keeper at `socket`: no other start under way (a
// marker older than 10 s is a start that died).
bool claim_start(const std::filesystem::path& socket) {
  const std::string marker = start_marker(socket);
  for (int attempt = 0; attempt < 2; ++attempt) {
    const int fd =
        ::open(marker.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd >= 0) {
      ::close(fd);
      return true;
    }
    struct stat st {};
    if (errno != EEXIST || ::lstat(marker.c_str(), &st) != 0 ||
        std::time(nullptr) - st.st_mtime < 10) {
      return false;
    }
    ::unlink(marker.c_str());
  }
  return false;
}

} // namespace

std::filesystem::path keeper_socket_path(const std::filesystem::path& state_dir,
                                         const ConnectOptions& options, bool make) {
  std::error_code ignored;
  const auto dir = std::filesystem::absolute(state_dir, ignored) / "ledger-keeper";
  if (!private_directory(dir, make)) {
    return {};
  }
  const auto salt = salt_of(dir, make);
  if (!salt) {
    return {};
  }
  std::vector<std::string> environment;
  for (char** entry = environ; entry && *entry; ++entry) {
    if (std::strncmp(*entry, "PG", 2) == 0 || std::strncmp(*entry, "HOME=", 5) == 0) {
      environment.emplace_back(*entry);
    }
  }
  std::sort(environment.begin(), environment.end());
  std::string identity = fmt::format("{}\nwire {}\n{}\n{}\n{}\n", *salt, wire::k_version,
                                     ::geteuid(), options.url, options.password.value_or(""));
  for (const auto& entry : environment) {
    identity += entry + '\n';
  }
  std::filesystem::path socket = dir / (sha256_hex(identity).substr(0, 20) + ".sock");
  if (socket.native().size() >= sizeof(sockaddr_un::sun_path)) {
    return {};
  }
  return socket;
}

void run_keeper(const std::filesystem::path& socket, const ConnectOptions& options,
                std::chrono::seconds idle,
                const std::function<std::unique_ptr<LibpqConnection>()>& first) {
  if (socket.empty()) {
    throw Error(ExitCode::usage,
                "no place for a keeper: the state directory's path is too long for a unix socket, "
                "or its ledger-keeper directory is not this user's alone; give a shorter "
                "--state-dir, or one of your own");
  }
  const std::string lock_path = socket.native() + ".lock";
  FileDescriptor lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (lock.get() < 0 || ::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    ::unlink(start_marker(socket).c_str());
    throw Error(ExitCode::lock_timeout,
                fmt::format("another keeper already serves this ledger ({}) for {}", options.where,
                            socket.parent_path().parent_path().string()));
  }
  Pool pool;
  pool.options = options;
  try {
    pool.give_back(first());
  } catch (const PgError& e) {
    spdlog::warn("keeper: {}", e.what()); // not reachable yet: each command will be told so
  }
  // Ours now: a socket left there is a dead keeper's.
  ::unlink(socket.c_str());
  FileDescriptor listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, socket.c_str(), socket.native().size() + 1);
  const mode_t old_mask = ::umask(0177); // srw-------
  const int bound =
      ::bind(listener.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address);
  ::umask(old_mask);
  if (listener.get() < 0 || bound != 0 || ::listen(listener.get(), 64) != 0) {
    ::unlink(start_marker(socket).c_str());
    throw Error(ExitCode::runtime,
                fmt::format("cannot listen on {}: {}", socket.string(), std::strerror(errno)));
  }
  const auto mine = identity_of(socket);
  ::unlink(start_marker(socket).c_str()); // started: the next start may be another's
  spdlog::info("keeper: serving {} (pid {}), until unused for {}s", options.where, ::getpid(),
               idle.count());

  struct Worker {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::list<Worker> workers;
  auto join_finished = [&workers] {
    workers.remove_if([](Worker& worker) {
      if (!*worker.done) {
        return false;
      }
      worker.thread.join();
      return true;
    });
  };
  while (!interrupt::requested()) {
    pollfd fds[2] = {{listener.get(), POLLIN, 0}, {interrupt::wake_fd(), POLLIN, 0}};
    const int ready = ::poll(fds, 2, 1000);
    if (ready > 0 && (fds[0].revents & POLLIN)) {
      const int client = ::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC);
      if (client >= 0 && !same_user(client)) {
        ::close(client);
      } else if (client >= 0) {
        auto done = std::make_shared<std::atomic<bool>>(false);
        ++pool.clients;
        pool.last_used = now_ms();
        try {
          workers.push_back({std::thread([&pool, done, client] {
                               try {
                                 serve_client(pool, client);
                               } catch (const std::exception& e) {
                                 spdlog::warn("keeper: a session ended on {}", e.what());
                               }
                               ::close(client);
                               pool.last_used = now_ms();
                               --pool.clients;
                               *done = true;
                             }),
                             done});
        } catch (const std::system_error& e) { // no thread to be had: that command connects itself
          ::close(client);
          --pool.clients;
          spdlog::warn("keeper: {}", e.what());
        }
      }
    }
    join_finished();
    if (identity_of(socket) != mine) {
      spdlog::info("keeper: its socket was removed or replaced; stopping");
      break;
    }
    const bool unused = pool.clients == 0 && now_ms() - pool.last_used >= idle.count() * 1000;
    if (idle.count() > 0 && unused) {
      spdlog::info("keeper: unused for {}s; stopping", idle.count());
      break;
    }
  }
  // First the name goes, so that no new command finds it; one already queued gets no greeting
  // when the listener closes, and connects itself.
  if (identity_of(socket) == mine) {
    ::unlink(socket.c_str());
  }
  ::close(listener.release());
  pool.stopping = true; // sessions under way end at their next wait for a request
  for (auto& worker : workers) {
    worker.thread.join();
  }
}

void start_keeper(const std::filesystem::path& state_dir, const std::filesystem::path& socket,
                  const std::string& url, std::chrono::seconds idle) {
  static std::once_flag started;
  std::call_once(started, [&] {
    if (!claim_start(socket)) {
      return;
    }
    std::error_code ignored;
    const auto absolute = std::filesystem::absolute(state_dir, ignored);
    const std::string log_path = (absolute / "ledger-keeper" / "keeper.log").string();
    proc::Command keeper;
    keeper.argv = {"sandboxer",
                   "--state-dir",
                   absolute.string(),
                   "ledger",
                   "keep",
                   "--idle",
                   fmt::format("{}s", idle.count())};
    keeper.env_set = keeper_environment(url);
    try {
      proc::start_detached(keeper, log_path, std::filesystem::path("/proc/self/exe"));
    } catch (const Error& e) {
      ::unlink(start_marker(socket).c_str());
      spdlog::debug("ledger {}: could not start a connection keeper: {}", url, e.what());
    }
  });
}

} // namespace sandboxer::ledger::pg
