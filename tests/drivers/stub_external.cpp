// The built-in stub driver served over the driver protocol by the SDK, as
// `sandboxer-driver-stub-external`: the same driver in-process and external, so that
// bench/driver-protocol.sh measures the protocol alone, and tests compare the two. It is also the
// reference of the protocol's optional copy methods (stat_path, copy_in, copy_out), which it
// serves against the sandbox's directory (directory_copy.cpp).
#include <cstdlib>
#include <fmt/format.h>
#include <unistd.h>

#include <sandboxer/error.hpp>
#include <sandboxer/ports.hpp>
#include <sandboxer/sdk.hpp>

#include "drivers/stub/stub_driver.hpp"
#include "tests/drivers/directory_copy.hpp"

namespace {

namespace fs = std::filesystem;
using sandboxer::Driver;
using sandboxer::SandboxHandle;

// The stub's driver, plus the copy methods on the sandbox's "/" (ROOT/sandboxes/ID/fs).
class Copying : public Driver {
public:
  Copying(std::unique_ptr<Driver> inner, fs::path root)
      : m_inner(std::move(inner)), m_root(std::move(root)) {}

  // Its commands run on this machine: a port in the sandbox is this machine's own, so a port is
  // its own host port (the reference of the protocol's ports, docs/ports.md).
  sandboxer::CreateResult create(const sandboxer::CreateRequest& request) override {
    for (const auto& port : request.ports) {
      if (port.host_port && *port.host_port != port.port) {
        throw sandboxer::DriverError(
            sandboxer::DriverError::Kind::invalid_spec,
            fmt::format("stub-external: port {}: the sandbox's ports are this machine's own; "
                        "host_port must be the port itself",
                        port.port));
      }
    }
    sandboxer::CreateResult result = m_inner->create(request);
    for (const auto& port : request.ports) {
      result.ports.push_back(
          sandboxer::host_binding(port.port, port.protocol, port.bind, port.port));
    }
    return result;
  }
  void destroy(const SandboxHandle& sandbox) override { m_inner->destroy(sandbox); }
  sandboxer::BackendStatus status(const SandboxHandle& sandbox) override {
    return m_inner->status(sandbox);
  }
  sandboxer::SnapshotResult snapshot(const SandboxHandle& sandbox,
                                     const sandboxer::SnapshotRequest& request) override {
    return m_inner->snapshot(sandbox, request);
  }
  void delete_snapshot(const std::string& backend_ref) override {
    m_inner->delete_snapshot(backend_ref);
  }
  int exec(const SandboxHandle& sandbox, const sandboxer::ExecRequest& request,
           sandboxer::ExecIo& io) override {
    return m_inner->exec(sandbox, request, io);
  }
  void extend(const SandboxHandle& sandbox, sandboxer::TimePoint deadline) override {
    m_inner->extend(sandbox, deadline);
  }
  std::vector<sandboxer::RemoteResource> list_remote(const sandboxer::Labels& selector) override {
    return m_inner->list_remote(selector);
  }
  void logs(const SandboxHandle& sandbox, const sandboxer::LogsRequest& request,
            sandboxer::LogSink& sink) override {
    m_inner->logs(sandbox, request, sink);
  }
  // Served when the stub's capabilities say pause (sdk/serve.cpp).
  sandboxer::PauseResult pause(const SandboxHandle& sandbox,
                               const sandboxer::PauseRequest& request) override {
    return m_inner->pause(sandbox, request);
  }
  sandboxer::ResumeResult resume(const SandboxHandle& sandbox,
                                 const sandboxer::ResumeRequest& request) override {
    return m_inner->resume(sandbox, request);
  }

  sandboxer::PathInfo stat_path(const SandboxHandle& sandbox, const std::string& path) override {
    return sandboxer::directory_copy::stat_path(fs_of(sandbox), path);
  }
  void copy_in(const SandboxHandle& sandbox, const sandboxer::CopyInRequest& request,
               sandboxer::CopySource& source) override {
    sandboxer::directory_copy::copy_in(fs_of(sandbox), request.directory, source);
  }
  void copy_out(const SandboxHandle& sandbox, const sandboxer::CopyOutRequest& request,
                sandboxer::CopySink& sink) override {
    // $SANDBOXER_STUB_EXTERNAL_DIE_IN_COPY_OUT=N: the process ends once N bytes of the stream
    // went out, as a driver that crashes mid-stream (the tests' fault).
    class Dying : public sandboxer::CopySink {
    public:
      Dying(sandboxer::CopySink& inner, long long limit) : m_inner(inner), m_limit(limit) {}
      void write(std::string_view bytes) override {
        m_inner.write(bytes);
        m_sent += static_cast<long long>(bytes.size());
        if (m_limit >= 0 && m_sent > m_limit) {
          ::_exit(3);
        }
      }

    private:
      sandboxer::CopySink& m_inner;
      long long m_limit;
      long long m_sent = 0;
    };
    const char* limit = std::getenv("SANDBOXER_STUB_EXTERNAL_DIE_IN_COPY_OUT");
    Dying dying(sink, limit && *limit ? std::atoll(limit) : -1);
    sandboxer::directory_copy::copy_out(fs_of(sandbox), request.path, request.follow, dying);
  }

private:
  fs::path fs_of(const SandboxHandle& sandbox) const {
    const std::string& id = sandbox.backend_id;
    fs::path dir = m_root / "sandboxes" / id / "fs";
    if (id.empty() || id.find('/') != std::string::npos || id[0] == '.' || !fs::is_directory(dir)) {
      throw sandboxer::DriverError(sandboxer::DriverError::Kind::not_found,
                                   fmt::format("stub-external: sandbox {} does not exist", id));
    }
    return dir;
  }

  std::unique_ptr<Driver> m_inner;
  fs::path m_root;
};

// The stub under another name: a built-in name always wins over an external driver.
class Renamed : public sandboxer::DriverFactory {
public:
  explicit Renamed(const sandboxer::DriverFactory& inner) : m_inner(inner) {}
  std::string_view name() const override { return "stub-external"; }
  std::string_view doc() const override { return m_inner.doc(); }
  sandboxer::Capabilities capabilities() const override {
    sandboxer::Capabilities caps = m_inner.capabilities();
    // Its own copy (directory_copy.cpp), not the stub's tar: no owner, as it runs unprivileged.
    caps.copy = true;
    caps.copy_owner = false;
    caps.ports = true;
    return caps;
  }
  nlohmann::json parse_spec(const nlohmann::json& section) const override {
    return m_inner.parse_spec(section);
  }
  std::unique_ptr<Driver> open(const nlohmann::json& spec,
                               const sandboxer::DriverContext& context) const override {
    // Where the stub keeps its sandboxes: its spec's root, else its data directory.
    fs::path root = context.root_or(m_inner.location(spec, context).value("root", ""));
    return std::make_unique<Copying>(m_inner.open(spec, context), root);
  }

private:
  const sandboxer::DriverFactory& m_inner;
};

} // namespace

int main() {
  static const Renamed factory(sandboxer::drivers::stub::stub_factory());
  return sandboxer::sdk::serve(factory);
}
