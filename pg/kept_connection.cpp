#include "pg/kept_connection.hpp"

#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <sandboxer/interrupt.hpp>
#include <sandboxer/log.hpp>

#include "pg/keeper.hpp"
#include "pg/keeper_wire.hpp"
#include "pg/libpq_connection.hpp"
#include "sdk/file_descriptor.hpp"

namespace sandboxer::ledger::pg {
namespace {

using SteadyClock = std::chrono::steady_clock;

std::atomic<bool> g_without_keeper = false;
std::atomic<bool> g_keeper_process = false;

} // namespace

void serve_as_keeper() {
  g_keeper_process = true;
  g_without_keeper = true;
}

bool serving_as_keeper() {
  return g_keeper_process;
}

std::unique_ptr<KeptConnection> KeptConnection::open(const std::filesystem::path& socket,
                                                     ConnectOptions options) {
  FileDescriptor fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (fd.get() < 0 || socket.native().size() >= sizeof address.sun_path) {
    return nullptr;
  }
  std::memcpy(address.sun_path, socket.c_str(), socket.native().size() + 1);
  // Non-blocking: a keeper whose backlog is full (EAGAIN) is passed over, not waited for.
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    return nullptr;
  }
  ucred peer{};
  socklen_t size = sizeof peer;
  if (::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &peer, &size) != 0 ||
      peer.uid != ::geteuid()) {
    return nullptr; // only a keeper of this user's may hold this user's sessions
  }
  // Its greeting says it serves: a keeper that is closing, or stalled (stopped, frozen), is
  // passed over within a second, and for the rest of this process.
  pollfd greeting = {fd.get(), POLLIN, 0};
  char hello = 0;
  if (::poll(&greeting, 1, 1000) != 1 || ::recv(fd.get(), &hello, 1, MSG_DONTWAIT) != 1 ||
      hello != static_cast<char>(wire::k_version)) {
    spdlog::debug("ledger {}: the connection keeper at {} did not greet; connecting directly",
                  options.where, socket.string());
    g_without_keeper = true;
    return nullptr;
  }
  return std::unique_ptr<KeptConnection>(new KeptConnection(fd.release(), std::move(options)));
}

KeptConnection::KeptConnection(int fd, ConnectOptions options)
    : Connection(std::move(options)), m_fd(fd) {}

KeptConnection::~KeptConnection() {
  if (m_fd >= 0) {
    ::close(m_fd);
  }
}

void KeptConnection::lose(const std::string& why) {
  if (m_fd >= 0) {
    ::close(m_fd); // the keeper sees the hang-up: it cancels the statement, rolls back
    m_fd = -1;
  }
  throw PgError(
      Failure::connection_lost, "",
      fmt::format("ledger {}: the connection keeper's session broke: {}", m_options.where, why));
}

void KeptConnection::wait_for(short events, SteadyClock::time_point deadline, const char* doing) {
  while (true) {
    if (m_abandon && m_abandon->load()) {
      lose(fmt::format("{} was abandoned", doing));
    }
    if (!m_abandon && interrupt::requested()) {
      ::close(m_fd); // the keeper sees the hang-up and cancels the statement
      m_fd = -1;
      interrupt::check();
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
    if (left.count() <= 0) {
      lose(fmt::format("no answer while {} within the deadline", doing));
    }
    // Once a signal came, either it is this wait's to act on (checked above, every pass) or a
    // shielded cleanup's, whose wake fd stays readable: it is left out rather than woken on again
    // and again.
    const bool watch_signals = !m_abandon && interrupt::count() == 0;
    pollfd fds[2] = {{m_fd, events, 0}, {watch_signals ? interrupt::wake_fd() : -1, POLLIN, 0}};
    const int ready =
        ::poll(fds, 2, static_cast<int>(std::min<long long>(left.count(), m_abandon ? 50 : 1000)));
    if (ready < 0 && errno != EINTR) {
      lose(std::strerror(errno));
    }
    if (ready > 0 && fds[0].revents) {
      return;
    }
  }
}

std::vector<Rows> KeptConnection::call(std::string request, std::chrono::milliseconds timeout) {
  if (m_fd < 0) {
    lose("it was closed");
  }
  const auto deadline =
      SteadyClock::now() + timeout + m_options.connect_timeout + std::chrono::seconds(2);
  const std::string out = wire::frame(std::move(request));
  for (std::size_t at = 0; at < out.size();) {
    const ssize_t sent = ::send(m_fd, out.data() + at, out.size() - at, MSG_NOSIGNAL);
    if (sent > 0) {
      at += static_cast<std::size_t>(sent);
    } else if (sent < 0 && (errno == EAGAIN || errno == EINTR)) {
      wait_for(POLLOUT, deadline, "sending a statement");
    } else {
      lose(sent < 0 ? std::strerror(errno) : "it hung up");
    }
  }
  std::string in;
  std::size_t wanted = 4;
  bool have_length = false;
  while (in.size() < wanted) {
    char buffer[65536];
    const ssize_t got =
        ::recv(m_fd, buffer, std::min(sizeof buffer, wanted - in.size()), MSG_DONTWAIT);
    if (got > 0) {
      in.append(buffer, static_cast<std::size_t>(got));
    } else if (got < 0 && (errno == EAGAIN || errno == EINTR)) {
      wait_for(POLLIN, deadline, "waiting for the server");
    } else {
      lose(got < 0 ? std::strerror(errno) : "the keeper hung up");
    }
    if (!have_length && in.size() == 4) {
      try {
        wanted = 4 + wire::frame_length(in.data());
      } catch (const wire::WireError& e) {
        lose(e.what());
      }
      in.reserve(wanted);
      have_length = true;
    }
  }
  wire::Reply reply;
  try {
    reply = wire::decode_reply(std::string_view(in).substr(4));
  } catch (const wire::WireError& e) {
    lose(fmt::format("its answer does not decode ({})", e.what()));
  }
  if (reply.failed) {
    throw PgError(reply.failure, reply.sqlstate, log::redact(reply.message));
  }
  return std::move(reply.results);
}

Rows KeptConnection::query(std::string_view sql, const std::vector<Param>& params,
                           std::chrono::milliseconds timeout) {
  wire::Request request{wire::Call::query, timeout, {{std::string(sql), params}}};
  auto results = call(wire::encode(request), timeout);
  if (results.size() != 1) {
    lose("a query's answer came without its rows");
  }
  return std::move(results[0]);
}

Rows KeptConnection::run_script(std::string_view sql, std::chrono::milliseconds timeout) {
  wire::Request request{wire::Call::script, timeout, {{std::string(sql), {}}}};
  auto results = call(wire::encode(request), timeout);
  if (results.size() != 1) {
    lose("a script's answer came without its rows");
  }
  return std::move(results[0]);
}

std::vector<Rows> KeptConnection::pipeline(const std::vector<Statement>& statements,
                                           std::chrono::milliseconds timeout) {
  wire::Request request{wire::Call::pipeline, timeout, statements};
  auto results = call(wire::encode(request), timeout);
  if (results.size() != statements.size()) {
    lose("a pipeline's answer has another count of results");
  }
  return results;
}

int KeptConnection::server_version() {
  wire::Request request{wire::Call::server_version, std::chrono::seconds(10), {}};
  auto results = call(wire::encode(request), request.timeout);
  try {
    return std::stoi(results.at(0).values.at(0).at(0).value_or("0"));
  } catch (const std::exception&) {
    lose("its server version is not a number");
  }
}

std::unique_ptr<Connection> open_connection(const ConnectOptions& options) {
  if (!g_without_keeper && !options.keeper_socket.empty()) {
    if (auto kept = KeptConnection::open(options.keeper_socket, options)) {
      return kept;
    }
    if (options.keeper_idle.count() > 0) {
      start_keeper(options.state_dir, options.keeper_socket, options.url, options.keeper_idle);
    }
  }
  return std::make_unique<LibpqConnection>(options);
}

} // namespace sandboxer::ledger::pg
