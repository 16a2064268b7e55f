#pragma once

#include <chrono>
#include <deque>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include <sandboxer/proc.hpp>

#include "sdk/protocol/protocol.hpp"

namespace sandboxer::external {

// The driver's own error answer: a DriverError of the kind it named, and for invalid_spec the
// JSON pointer of the offending key inside the spec (`data.pointer`), when it gave one.
class RemoteError : public DriverError {
public:
  RemoteError(Kind kind, const std::string& message, std::string pointer,
              bool method_not_found = false)
      : DriverError(kind, message), m_pointer(std::move(pointer)),
        m_method_not_found(method_not_found) {}
  const std::string& pointer() const { return m_pointer; }
  // JSON-RPC's -32601 (the kind is then unsupported), not the driver's own word.
  bool method_not_found() const { return m_method_not_found; }

private:
  std::string m_pointer;
  bool m_method_not_found = false;
};

// One running external driver and the JSON-RPC conversation with it: one call at a time, each
// with a deadline. Its stderr goes to sandboxer's log, line by line.
class Connection {
public:
  // Starts the program (no arguments); throws DriverError when it cannot be started.
  Connection(std::string name, std::filesystem::path path);
  // Closes its stdin and gives it the grace period to exit, then kills it.
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  struct Call {
    std::string method;
    nlohmann::json params = nlohmann::json::object();
    std::chrono::milliseconds timeout{30'000};
    // `output` notifications of this call (exec).
    std::function<void(const nlohmann::json& params)> on_output;
    // Sent to the driver as `input` notifications of this call until EOF (exec with stdin).
    int input_fd = -1;
    // copy_in's tar stream: the next bytes into the buffer, 0 at its end. Sent as `input` chunks
    // of at most protocol::k_copy_chunk, then the end, while the driver's stdout and stderr are
    // still read (a driver that answers early is never stuck behind a full pipe). A result before
    // the end was sent is an error: the driver did not take the whole stream.
    std::function<size_t(char* buffer, size_t size)> source;
    // The deadline counts from the last chunk that moved, not from the call's start: a copy of
    // any size goes on while it makes progress.
    bool deadline_from_progress = false;
    // Bytes of the source sent so far (copy_in's result is checked against it).
    uint64_t* sent = nullptr;
  };
  // The call's result. Throws DriverError: the driver's own error, or a broken conversation (the
  // driver exited, wrote something that is not JSON-RPC, or missed the deadline), after which
  // usable() is false.
  nlohmann::json call(const Call& call);
  bool usable() const { return m_usable; }
  const std::filesystem::path& path() const { return m_path; }

private:
  [[noreturn]] void broken(DriverError::Kind kind, const std::string& what);
  void read_stderr();
  void send_input(long id, int& input_fd);
  // Writes what `pending` still holds from `offset` as far as the driver's stdin takes it now;
  // false when the driver stopped reading.
  bool write_pending(const std::string& pending, size_t& offset);

  std::string m_name;
  std::filesystem::path m_path;
  proc::Child m_child;
  protocol::LineBuffer m_out, m_err;
  std::deque<std::string> m_last_stderr; // quoted in errors: why the driver gave up
  long m_next_id = 0;
  bool m_usable = true;
};

} // namespace sandboxer::external
