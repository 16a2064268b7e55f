#include "src/ledger/pg/keeper.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fmt/format.h>
#include <list>
#include <mutex>
#include <poll.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include <sandboxer/error.hpp>
#include <sandboxer/interrupt.hpp>
#include <sandboxer/log.hpp>

#include "src/file_descriptor.hpp"
#include "src/ledger/pg/keeper_wire.hpp"
#include "src/ledger/pg/libpq_connection.hpp"
#include "src/sha256.hpp"

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
    connection->watch(-1);
    std::lock_guard lock(mutex);
    if (idle.size() < k_pooled) {
      idle.push_back(std::move(connection));
    }
  }
};

// Reads exactly `size` bytes; false at the client's end of stream (or its error) or when the
// keeper is asked to stop.
bool read_exact(int fd, char* out, std::size_t size) {
  while (size > 0) {
    pollfd fds[2] = {{fd, POLLIN, 0}, {interrupt::wake_fd(), POLLIN, 0}};
    if (::poll(fds, 2, 1000) < 0 && errno != EINTR) {
      return false;
    }
    if (interrupt::requested()) {
      return false;
    }
    if (!(fds[0].revents & (POLLIN | POLLHUP | POLLERR))) {
      continue;
    }
    const ssize_t got = ::recv(fd, out, size, 0);
    if (got <= 0) {
      if (got < 0 && (errno == EINTR || errno == EAGAIN)) {
        continue;
      }
      return false;
    }
    out += got;
    size -= static_cast<std::size_t>(got);
  }
  return true;
}

// Sends a whole frame within `deadline`; false when the client is gone or stopped reading.
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

// One command's session: its requests run in turn on one database connection, held from its
// first request until it hangs up, so that its transactions stay whole.
void serve_client(Pool& pool, FileDescriptor client) {
  std::unique_ptr<LibpqConnection> connection;
  bool lost = false; // its database connection broke: so does the session, as it would direct
  while (true) {
    char prefix[4];
    std::string body;
    try {
      if (!read_exact(client.get(), prefix, 4)) {
        break;
      }
      body.resize(wire::frame_length(prefix));
      if (!read_exact(client.get(), body.data(), body.size())) {
        break;
      }
    } catch (const wire::WireError& e) {
      spdlog::warn("keeper: a client sent a damaged frame ({}); its session ends", e.what());
      break;
    }
    pool.last_used = now_ms();
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
      connection->watch(client.get());
      reply = answer(*connection, request);
    } catch (const wire::WireError& e) {
      spdlog::warn("keeper: a client sent a request that does not decode ({}); its session ends",
                   e.what());
      break;
    } catch (const PgError& e) {
      reply.failed = true;
      reply.failure = e.failure();
      reply.sqlstate = e.sqlstate();
      reply.message = e.what();
      if (e.failure() == Failure::connection_lost || e.failure() == Failure::unavailable) {
        connection.reset();
        lost = true;
      }
    } catch (const Interrupted&) {
      break; // the keeper stops: the client sees its session end, as a dropped connection
    }
    if (!write_all(client.get(), wire::frame(wire::encode(reply)), SteadyClock::now() + 30s)) {
      break;
    }
    pool.last_used = now_ms();
  }
  pool.give_back(std::move(connection));
  pool.last_used = now_ms();
}

bool same_user(int fd) {
  ucred peer{};
  socklen_t size = sizeof peer;
  return ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &size) == 0 && peer.uid == ::geteuid();
}

ino_t inode_of(const std::filesystem::path& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

} // namespace

std::filesystem::path keeper_socket_path(const std::filesystem::path& state_dir,
                                         const ConnectOptions& options) {
  std::vector<std::string> pg_environment;
  for (char** entry = environ; entry && *entry; ++entry) {
    if (std::strncmp(*entry, "PG", 2) == 0) {
      pg_environment.emplace_back(*entry);
    }
  }
  std::sort(pg_environment.begin(), pg_environment.end());
  std::string identity = fmt::format("wire {}\n{}\n{}\n{}\n", wire::k_version, ::geteuid(),
                                     options.url, options.password.value_or(""));
  for (const auto& entry : pg_environment) {
    identity += entry + '\n';
  }
  std::error_code ignored;
  std::filesystem::path socket = std::filesystem::absolute(state_dir, ignored) / "ledger-keeper" /
                                 (sha256_hex(identity).substr(0, 20) + ".sock");
  if (socket.native().size() >= sizeof(sockaddr_un::sun_path)) {
    return {};
  }
  return socket;
}

void run_keeper(const std::filesystem::path& socket, const ConnectOptions& options,
                std::chrono::seconds idle, std::unique_ptr<LibpqConnection> first) {
  if (socket.empty()) {
    throw Error(ExitCode::usage, "the state directory's path is too long for the keeper's unix "
                                 "socket; give a shorter --state-dir");
  }
  const auto dir = socket.parent_path();
  std::filesystem::create_directories(dir);
  ::chmod(dir.c_str(), 0700);
  const std::string lock_path = socket.native() + ".lock";
  FileDescriptor lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (lock.get() < 0 || ::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    throw Error(ExitCode::lock_timeout,
                fmt::format("another keeper already serves {}", socket.string()));
  }
  // Ours now: a socket left there is a dead keeper's.
  ::unlink(socket.c_str());
  FileDescriptor listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, socket.c_str(), socket.native().size() + 1);
  const mode_t old_mask = ::umask(0077);
  const int bound =
      ::bind(listener.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address);
  ::umask(old_mask);
  if (listener.get() < 0 || bound != 0 || ::listen(listener.get(), 64) != 0) {
    throw Error(ExitCode::runtime,
                fmt::format("cannot listen on {}: {}", socket.string(), std::strerror(errno)));
  }
  const ino_t mine = inode_of(socket);
  spdlog::info("keeper: serving {} at {} (pid {}), until idle for {}s", options.where,
               socket.string(), ::getpid(), idle.count());

  Pool pool;
  pool.options = options;
  pool.give_back(std::move(first));
  struct Worker {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::list<Worker> workers;
  while (!interrupt::requested()) {
    pollfd fds[2] = {{listener.get(), POLLIN, 0}, {interrupt::wake_fd(), POLLIN, 0}};
    const int ready = ::poll(fds, 2, 1000);
    if (ready > 0 && (fds[0].revents & POLLIN)) {
      FileDescriptor client(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (client.get() >= 0 && same_user(client.get())) {
        auto done = std::make_shared<std::atomic<bool>>(false);
        ++pool.clients;
        pool.last_used = now_ms();
        workers.push_back({std::thread([&pool, done, fd = client.release()] {
                             serve_client(pool, FileDescriptor(fd));
                             --pool.clients;
                             *done = true;
                           }),
                           done});
      }
    }
    workers.remove_if([](Worker& worker) {
      if (!*worker.done) {
        return false;
      }
      worker.thread.join();
      return true;
    });
    if (inode_of(socket) != mine) {
      spdlog::info("keeper: {} was removed or replaced; stopping", socket.string());
      break;
    }
    const bool unused = pool.clients == 0 && now_ms() - pool.last_used >= idle.count() * 1000;
    if (idle.count() > 0 && unused) {
      spdlog::info("keeper: unused for {}s; stopping", idle.count());
      break;
    }
  }
  if (inode_of(socket) == mine) {
    ::unlink(socket.c_str());
  }
  ::close(listener.release());
  // Sessions under way end when their commands hang up or the signal ends their statements.
  for (auto& worker : workers) {
    worker.thread.join();
  }
}

void start_keeper(const std::filesystem::path& state_dir, const std::string& url,
                  std::chrono::seconds idle) {
  static std::once_flag started;
  std::call_once(started, [&] {
    std::error_code ignored;
    const auto dir = state_dir / "ledger-keeper";
    std::filesystem::create_directories(dir, ignored);
    ::chmod(dir.c_str(), 0700);
    const std::string log_path = (dir / "keeper.log").string();
    const std::string idle_text = fmt::format("{}s", idle.count());
    const std::string state_text = std::filesystem::absolute(state_dir, ignored).string();
    std::vector<std::string> words = {"sandboxer", "--state-dir", state_text, "--ledger", url,
                                      "ledger",    "keep",        "--idle",   idle_text};
    std::vector<char*> argv;
    for (auto& word : words) {
      argv.push_back(word.data());
    }
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attributes;
    ::posix_spawn_file_actions_init(&actions);
    ::posix_spawnattr_init(&attributes);
    // Its own session, so that a Ctrl-C meant for this command leaves it be; no descriptor of
    // ours (a CI runner's pipe would wait for it).
    ::posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSID);
    ::posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    ::posix_spawn_file_actions_addopen(&actions, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                       0600);
    ::posix_spawn_file_actions_adddup2(&actions, 1, 2);
    ::posix_spawn_file_actions_addclosefrom_np(&actions, 3);
    pid_t pid = 0;
    const int failed =
        ::posix_spawn(&pid, "/proc/self/exe", &actions, &attributes, argv.data(), environ);
    ::posix_spawn_file_actions_destroy(&actions);
    ::posix_spawnattr_destroy(&attributes);
    if (failed != 0) {
      spdlog::debug("ledger {}: could not start a connection keeper: {}", url,
                    std::strerror(failed));
    }
  });
}

} // namespace sandboxer::ledger::pg
