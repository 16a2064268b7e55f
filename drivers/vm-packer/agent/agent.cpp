// sandboxer-guest-agent: runs commands for sandboxer inside a VM, on the virtio-serial ports
// named org.sandboxer.agent.N (docs/drivers/vm-packer.md, "Guest agent"). One connection per port
// at a time, many commands per connection (channels), streamed stdout/stderr, stdin, exit codes,
// a terminal with resize, and signals. Static, with no other dependency, so any image can carry
// it; in the tiny test image it is PID 1 and so also reaps every orphan.
//
// --listen PATH serves a unix socket instead of the ports (tests on the host).
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <map>
#include <poll.h>
#include <pty.h>
#include <string>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>
#include <vector>

#include "drivers/vm-packer/agent/wire.hpp"

namespace {

using namespace sandboxer::vm_agent;
using Clock = std::chrono::steady_clock;

constexpr std::size_t k_outbox_limit = 4 << 20; // stop reading a command's output beyond this
// Stop reading the host's frames while a command holds this much of its stdin unread: the host's
// writes then wait (within their deadline) instead of the agent's memory growing without end.
constexpr std::size_t k_stdin_limit = 4 << 20;
// After the command exits, output still open (a background child holding it) is read for this
// long after its last byte, then the exit is reported: an exec ends with its command.
constexpr auto k_drain_quiet = std::chrono::milliseconds(100);
// A disconnected virtio port always polls as hung up: it is looked at again this often.
constexpr auto k_reconnect_probe = std::chrono::milliseconds(20);

struct Exec {
  pid_t pid = -1;
  int in_fd = -1, out_fd = -1, err_fd = -1; // err_fd stays -1 on a terminal
  bool tty = false;
  std::string pending_stdin;
  bool close_stdin = false;
  bool exited = false;
  int status = 0;
  Clock::time_point last_output{};
};

struct Port {
  std::string name;
  int fd = -1;        // the virtio port, or the accepted connection with --listen
  int listen_fd = -1; // with --listen
  bool connected = false;
  bool synced = false;
  FrameReader reader;
  std::string outbox;
  std::map<std::uint32_t, Exec> execs;
  Clock::time_point next_probe{};
};

void close_fd(int& fd) {
  if (fd >= 0) {
    ::close(fd);
    fd = -1;
  }
}

void queue(Port& port, FrameType type, std::uint32_t channel, std::string payload) {
  port.outbox += encode(Frame{type, channel, std::move(payload)});
}

std::string hello_marker() {
  std::string header = encode(Frame{FrameType::hello, 0, std::string(k_nonce_size, '\0')});
  return header.substr(0, k_header_size);
}

void end_exec(Exec& exec, bool kill_group) {
  if (kill_group && !exec.exited && exec.pid > 0) {
    ::kill(-exec.pid, SIGKILL);
  }
  close_fd(exec.in_fd);
  close_fd(exec.out_fd);
  close_fd(exec.err_fd);
}

// A new session (a hello): the commands of the last one still running go with it, as with ssh.
void end_session(Port& port) {
  for (auto& [channel, exec] : port.execs) {
    end_exec(exec, true);
  }
  port.execs.clear();
  port.outbox.clear();
}

// The connection is gone, or its bytes make no sense: nothing more is read until a hello.
void reset(Port& port) {
  end_session(port);
  port.reader = FrameReader();
  port.synced = false;
}

void disconnect(Port& port) {
  reset(port);
  port.connected = false;
  if (port.listen_fd >= 0) {
    close_fd(port.fd);
  }
  port.next_probe = Clock::now() + k_reconnect_probe;
}

std::vector<std::string> environment_of(const StartRequest& request) {
  std::map<std::string, std::string> env = {
      {"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
      {"HOME", "/root"},
      {"USER", "root"},
  };
  for (const auto& [key, value] : request.env) {
    env[key] = value;
  }
  std::vector<std::string> out;
  for (const auto& [key, value] : env) {
    out.push_back(key + "=" + value);
  }
  return out;
}

// Runs in the child after fork: never returns.
[[noreturn]] void run_child(const StartRequest& request, int in, int out, int err, int report) {
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::signal(SIGPIPE, SIG_DFL);
  ::setsid();
  if (request.tty) {
    ::ioctl(in, TIOCSCTTY, 0);
  }
  ::dup2(in, 0);
  ::dup2(out, 1);
  ::dup2(err, 2);
  const std::string dir = request.workdir.empty() ? "/root" : request.workdir;
  if (::chdir(dir.c_str()) != 0 && request.workdir.empty()) {
    (void)::chdir("/");
  } else if (!request.workdir.empty() && ::access(dir.c_str(), X_OK) != 0) {
    int error = errno;
    (void)::write(report, &error, sizeof error);
    ::_exit(126);
  }
  std::vector<std::string> env_text = environment_of(request);
  std::vector<char*> envp, argv;
  for (auto& entry : env_text) {
    envp.push_back(entry.data());
  }
  envp.push_back(nullptr);
  std::vector<std::string> args = request.argv;
  for (auto& arg : args) {
    argv.push_back(arg.data());
  }
  argv.push_back(nullptr);
  ::environ = envp.data();
  ::execvp(argv[0], argv.data());
  int error = errno;
  (void)::write(report, &error, sizeof error);
  ::_exit(127);
}

void start(Port& port, std::uint32_t channel, const StartRequest& request) {
  if (port.execs.count(channel)) {
    queue(port, FrameType::exit, channel,
          encode_exit({ExitReport::Kind::not_startable, 0, "channel already in use"}));
    return;
  }
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) {
    queue(port, FrameType::exit, channel,
          encode_exit({ExitReport::Kind::not_startable, 0, std::strerror(errno)}));
    return;
  }
  Exec exec;
  exec.tty = request.tty;
  int child_in = -1, child_out = -1, child_err = -1;
  bool opened = false;
  if (request.tty) {
    winsize size{};
    size.ws_row = request.rows ? request.rows : 24;
    size.ws_col = request.cols ? request.cols : 80;
    int parent = -1, child = -1;
    if (::openpty(&parent, &child, nullptr, nullptr, &size) == 0) {
      ::fcntl(parent, F_SETFD, FD_CLOEXEC);
      ::fcntl(child, F_SETFD, FD_CLOEXEC);
      exec.in_fd = parent;
      exec.out_fd = ::fcntl(parent, F_DUPFD_CLOEXEC, 0);
      child_in = child_out = child_err = child;
      opened = exec.out_fd >= 0;
    }
  } else {
    int in[2] = {-1, -1}, out[2], err[2];
    bool piped =
        (request.attach_stdin ? ::pipe2(in, O_CLOEXEC) == 0
                              : (in[0] = ::open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0) &&
        ::pipe2(out, O_CLOEXEC) == 0 && ::pipe2(err, O_CLOEXEC) == 0;
    if (piped) {
      child_in = in[0], exec.in_fd = in[1];
      child_out = out[1], exec.out_fd = out[0];
      child_err = err[1], exec.err_fd = err[0];
      opened = true;
    }
  }
  if (!opened) {
    queue(port, FrameType::exit, channel,
          encode_exit({ExitReport::Kind::not_startable, 0, std::strerror(errno)}));
    ::close(report[0]);
    ::close(report[1]);
    return;
  }
  pid_t pid = ::fork();
  if (pid == 0) {
    run_child(request, child_in, child_out, child_err, report[1]);
  }
  ::close(report[1]);
  ::close(child_in); // on a terminal, one fd serves as all three
  if (!request.tty) {
    ::close(child_out);
    ::close(child_err);
  }
  int error = 0;
  ssize_t got = pid < 0 ? 0 : ::read(report[0], &error, sizeof error);
  ::close(report[0]);
  if (pid < 0 || got == static_cast<ssize_t>(sizeof error)) {
    if (pid > 0) {
      ::waitpid(pid, nullptr, 0);
    }
    int why = pid < 0 ? errno : error;
    end_exec(exec, false);
    queue(
        port, FrameType::exit, channel,
        encode_exit({why == ENOENT ? ExitReport::Kind::not_found : ExitReport::Kind::not_startable,
                     why == ENOENT ? 127 : 126, std::strerror(why)}));
    return;
  }
  for (int fd : {exec.in_fd, exec.out_fd, exec.err_fd}) {
    if (fd >= 0) {
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    }
  }
  if (!request.attach_stdin && !request.tty) {
    close_fd(exec.in_fd);
  }
  exec.pid = pid;
  port.execs.emplace(channel, std::move(exec));
}

void handle(Port& port, Frame frame) {
  if (frame.type == FrameType::hello) {
    if (frame.payload.size() != k_nonce_size) {
      throw WireError("a hello without its nonce");
    }
    end_session(port);
    port.synced = true;
    queue(port, FrameType::hello_ack, 0, frame.payload);
    return;
  }
  if (frame.type == FrameType::start) {
    start(port, frame.channel, decode_start(frame.payload));
    return;
  }
  auto found = port.execs.find(frame.channel);
  if (found == port.execs.end()) {
    return; // an exec that already ended: input for it is moot
  }
  Exec& exec = found->second;
  switch (frame.type) {
  case FrameType::stdin_data:
    if (frame.payload.empty()) {
      exec.close_stdin = true;
    } else {
      exec.pending_stdin += frame.payload;
    }
    break;
  case FrameType::resize:
    if (exec.tty && exec.in_fd >= 0) {
      auto [rows, cols] = decode_size(frame.payload);
      winsize size{};
      size.ws_row = rows;
      size.ws_col = cols;
      ::ioctl(exec.in_fd, TIOCSWINSZ, &size); // the kernel sends SIGWINCH
    }
    break;
  case FrameType::signal:
    if (frame.payload.size() == 1 && !exec.exited) {
      ::kill(-exec.pid, static_cast<std::uint8_t>(frame.payload[0]));
    }
    break;
  default:
    throw WireError("a frame only the agent sends");
  }
}

bool stdin_full(const Port& port) {
  for (const auto& [channel, exec] : port.execs) {
    if (exec.pending_stdin.size() >= k_stdin_limit) {
      return true;
    }
  }
  return false;
}

void read_port(Port& port) {
  char buffer[65536];
  while (!stdin_full(port)) {
    ssize_t n = ::read(port.fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return;
    }
    if (n <= 0) {
      disconnect(port);
      return;
    }
    port.reader.feed(std::string_view(buffer, static_cast<std::size_t>(n)));
    try {
      while (true) {
        if (!port.synced && !port.reader.skip_to(hello_marker())) {
          break;
        }
        auto frame = port.reader.next();
        if (!frame) {
          break;
        }
        if (!port.synced && frame->type != FrameType::hello) {
          continue;
        }
        handle(port, std::move(*frame));
      }
    } catch (const WireError&) {
      reset(port); // skip to the next hello
    }
  }
}

void write_port(Port& port) {
  while (!port.outbox.empty()) {
    ssize_t n = ::write(port.fd, port.outbox.data(), port.outbox.size());
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return;
    }
    if (n <= 0) {
      disconnect(port);
      return;
    }
    port.outbox.erase(0, static_cast<std::size_t>(n));
  }
}

// Moves what the command printed into frames; false once the fd is at its end.
bool pump_output(Port& port, std::uint32_t channel, Exec& exec, int& fd, FrameType type) {
  char buffer[32768];
  while (fd >= 0 && port.outbox.size() < k_outbox_limit) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return true;
    }
    if (n <= 0) { // EOF, or EIO from a terminal whose last holder closed it
      close_fd(fd);
      return false;
    }
    exec.last_output = Clock::now();
    queue(port, type, channel, std::string(buffer, static_cast<std::size_t>(n)));
  }
  return fd >= 0;
}

void pump_stdin(Exec& exec) {
  while (exec.in_fd >= 0 && !exec.pending_stdin.empty()) {
    ssize_t n = ::write(exec.in_fd, exec.pending_stdin.data(), exec.pending_stdin.size());
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0 && errno == EAGAIN) {
      return;
    }
    if (n <= 0) {
      exec.pending_stdin.clear();
      break;
    }
    exec.pending_stdin.erase(0, static_cast<std::size_t>(n));
  }
  if (exec.close_stdin && exec.pending_stdin.empty() && !exec.tty) {
    close_fd(exec.in_fd);
  } else if (exec.close_stdin && exec.pending_stdin.empty() && exec.tty && exec.in_fd >= 0) {
    const char eof = 4; // ^D: the terminal's end of input
    (void)::write(exec.in_fd, &eof, 1);
    exec.close_stdin = false;
  }
}

void finish_done_execs(Port& port) {
  auto now = Clock::now();
  for (auto it = port.execs.begin(); it != port.execs.end();) {
    Exec& exec = it->second;
    bool output_open = exec.out_fd >= 0 || exec.err_fd >= 0;
    if (!exec.exited || (output_open && now - exec.last_output < k_drain_quiet)) {
      ++it;
      continue;
    }
    ExitReport report;
    if (WIFSIGNALED(exec.status)) {
      report.kind = ExitReport::Kind::signaled;
      report.value = WTERMSIG(exec.status);
    } else {
      report.value = WEXITSTATUS(exec.status);
    }
    end_exec(exec, false);
    queue(port, FrameType::exit, it->first, encode_exit(report));
    it = port.execs.erase(it);
  }
}

void reap_children(std::vector<Port>& ports) {
  while (true) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) {
      return;
    }
    for (auto& port : ports) {
      for (auto& [channel, exec] : port.execs) {
        if (exec.pid == pid) {
          exec.exited = true;
          exec.status = status;
          exec.last_output = Clock::now();
        }
      }
    }
  }
}

// The virtio ports named PREFIX0, PREFIX1, ...: /sys/class/virtio-ports/vportNpM/name.
void find_ports(std::vector<Port>& ports, const std::string& prefix) {
  DIR* dir = ::opendir("/sys/class/virtio-ports");
  if (!dir) {
    return;
  }
  while (dirent* entry = ::readdir(dir)) {
    std::string device = entry->d_name;
    if (device.rfind("vport", 0) != 0) {
      continue;
    }
    std::ifstream name_file("/sys/class/virtio-ports/" + device + "/name");
    std::string name;
    std::getline(name_file, name);
    if (name.rfind(prefix, 0) != 0) {
      continue;
    }
    bool known = false;
    for (const auto& port : ports) {
      known = known || port.name == name;
    }
    if (known) {
      continue;
    }
    int fd = ::open(("/dev/" + device).c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) {
      Port port;
      port.name = name;
      port.fd = fd;
      ports.push_back(std::move(port));
    }
  }
  ::closedir(dir);
}

int listen_on(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (fd < 0 || path.size() >= sizeof address.sun_path) {
    return -1;
  }
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  ::unlink(path.c_str());
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(fd, 4) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

} // namespace

int main(int argc, char** argv) {
  std::string prefix = "org.sandboxer.agent.";
  std::string listen_path;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--prefix") {
      prefix = argv[i + 1];
    } else if (flag == "--listen") {
      listen_path = argv[i + 1];
    }
  }
  ::signal(SIGPIPE, SIG_IGN);
  sigset_t child;
  sigemptyset(&child);
  sigaddset(&child, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &child, nullptr);
  int child_fd = ::signalfd(-1, &child, SFD_NONBLOCK | SFD_CLOEXEC);

  std::vector<Port> ports;
  if (!listen_path.empty()) {
    Port port;
    port.name = listen_path;
    port.listen_fd = listen_on(listen_path);
    if (port.listen_fd < 0) {
      std::perror("sandboxer-guest-agent: --listen");
      return 1;
    }
    ports.push_back(std::move(port));
  }
  auto next_scan = Clock::now();
  while (true) {
    auto now = Clock::now();
    if (listen_path.empty() && now >= next_scan) {
      find_ports(ports, prefix);
      next_scan = now + std::chrono::seconds(ports.empty() ? 0 : 2) +
                  std::chrono::milliseconds(ports.empty() ? 50 : 0);
    }
    // A disconnected virtio port is probed, not polled (it would always say hung up).
    for (auto& port : ports) {
      if (!port.connected && port.listen_fd < 0 && now >= port.next_probe) {
        pollfd probe{port.fd, POLLIN, 0};
        ::poll(&probe, 1, 0);
        port.connected = !(probe.revents & POLLHUP);
        port.next_probe = now + k_reconnect_probe;
      }
    }
    std::vector<pollfd> fds;
    std::vector<std::pair<Port*, std::pair<std::uint32_t, int>>> owners; // fd role per entry
    fds.push_back({child_fd, POLLIN, 0});
    owners.push_back({nullptr, {0, 0}});
    bool draining = false;
    for (auto& port : ports) {
      if (port.listen_fd >= 0 && !port.connected) {
        fds.push_back({port.listen_fd, POLLIN, 0});
        owners.push_back({&port, {0, 3}});
        continue;
      }
      if (!port.connected) {
        continue;
      }
      const short wanted = (stdin_full(port) ? 0 : POLLIN) | (port.outbox.empty() ? 0 : POLLOUT);
      fds.push_back({port.fd, wanted, 0});
      owners.push_back({&port, {0, 0}});
      for (auto& [channel, exec] : port.execs) {
        draining = draining || exec.exited;
        bool room = port.outbox.size() < k_outbox_limit;
        if (exec.out_fd >= 0 && room) {
          fds.push_back({exec.out_fd, POLLIN, 0});
          owners.push_back({&port, {channel, 1}});
        }
        if (exec.err_fd >= 0 && room) {
          fds.push_back({exec.err_fd, POLLIN, 0});
          owners.push_back({&port, {channel, 2}});
        }
        if (exec.in_fd >= 0 && !exec.pending_stdin.empty()) {
          fds.push_back({exec.in_fd, POLLOUT, 0});
          owners.push_back({&port, {channel, 4}});
        }
      }
    }
    bool probing = ports.empty();
    for (const auto& port : ports) {
      probing = probing || (!port.connected && port.listen_fd < 0);
    }
    int timeout = (draining || probing) ? static_cast<int>(k_reconnect_probe.count()) : 1000;
    if (::poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) {
      std::perror("sandboxer-guest-agent: poll");
      return 1;
    }
    if (fds[0].revents & POLLIN) {
      signalfd_siginfo info;
      while (::read(child_fd, &info, sizeof info) > 0) {
      }
      reap_children(ports);
    }
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if (!fds[i].revents) {
        continue;
      }
      Port& port = *owners[i].first;
      auto [channel, role] = owners[i].second;
      if (role == 3) {
        int fd = ::accept4(port.listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
          port.fd = fd;
          port.connected = true;
        }
        continue;
      }
      if (role == 0) {
        if ((fds[i].revents & POLLHUP) && !(fds[i].revents & POLLIN)) {
          disconnect(port);
          continue;
        }
        if (fds[i].revents & POLLIN) {
          read_port(port);
        }
        continue;
      }
      auto found = port.execs.find(channel);
      if (found == port.execs.end()) {
        continue; // ended by a reset earlier in this round
      }
      Exec& exec = found->second;
      if (role == 1) {
        pump_output(port, channel, exec, exec.out_fd, FrameType::stdout_data);
      } else if (role == 2) {
        pump_output(port, channel, exec, exec.err_fd, FrameType::stderr_data);
      } else if (role == 4) {
        pump_stdin(exec);
      }
    }
    for (auto& port : ports) {
      for (auto& [channel, exec] : port.execs) {
        if (exec.close_stdin || !exec.pending_stdin.empty()) {
          pump_stdin(exec);
        }
      }
      finish_done_execs(port);
      if (port.connected && !port.outbox.empty()) {
        write_port(port);
      }
    }
  }
}
