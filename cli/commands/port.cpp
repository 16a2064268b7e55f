// `sandboxer port`: where a sandbox's exposed ports are reached, as `docker port` prints it
// (docs/ports.md).
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <sandboxer/ports.hpp>

#include "cli/commands/commands.hpp"
#include "core/errors.hpp"
#include "core/lifecycle/rules.hpp"

namespace sandboxer::commands {
namespace {

struct PortArgs {
  std::string id;
  std::optional<std::string> port; // PORT or PORT/PROTO
};

// "8080" or "8080/udp": the port and its protocol (tcp when not written).
std::pair<int, std::string> port_of(const std::string& text) {
  const size_t slash = text.find('/');
  const auto port = port_number(text.substr(0, slash));
  const std::string protocol = slash == std::string::npos ? "tcp" : text.substr(slash + 1);
  if (!port || (protocol != "tcp" && protocol != "udp")) {
    throw UsageError(fmt::format("port \"{}\": expected PORT or PORT/PROTO, PORT from 1 to 65535 "
                                 "and PROTO tcp or udp (e.g. 8080, 53/udp)",
                                 text));
  }
  return {*port, protocol};
}

// Where a client connects: HOST:PORT, or the URL alone where the backend gives no port of its own.
std::string where(const PortBinding& binding) {
  if (!binding.host_port) {
    return binding.url;
  }
  if (binding.host.find(':') != std::string::npos) {
    return fmt::format("[{}]:{}", binding.host, *binding.host_port);
  }
  return fmt::format("{}:{}", binding.host, *binding.host_port);
}

ExitCode run_port(Context& context, const PortArgs& args) {
  std::optional<std::pair<int, std::string>> wanted;
  if (args.port) {
    wanted = port_of(*args.port);
  }
  SandboxRecord record = context.engine().get(args.id);
  if (!is_live(record.state)) {
    throw Error(ExitCode::conflict, fmt::format("sandbox {} is {}: its ports went with it",
                                                record.id, to_string(record.state)));
  }
  std::vector<PortBinding> shown;
  for (const auto& binding : record.ports) {
    if (!wanted || (binding.port == wanted->first && binding.protocol == wanted->second)) {
      shown.push_back(binding);
    }
  }
  if (wanted && shown.empty()) {
    throw NotFoundError(fmt::format(
        "sandbox {} does not expose port {}/{} ({}); its profile's `ports:` says which it does",
        record.id, wanted->first, wanted->second, exposed_ports_text(record.ports)));
  }

  context.out().print(port_bindings_json(shown), [&] {
    Table table;
    for (const auto& binding : shown) {
      if (wanted) {
        table.rows.push_back({where(binding)});
      } else {
        table.rows.push_back(
            {fmt::format("{}/{} -> {}", binding.port, binding.protocol, where(binding))});
      }
    }
    return table;
  });
  return ExitCode::ok;
}

} // namespace

void setup_port(CLI::App& app, Runner& runner) {
  auto args = std::make_shared<PortArgs>();
  app.add_option("id", args->id, "Sandbox id or name")->required();
  app.add_option("port", args->port, "Only this port: PORT or PORT/PROTO (tcp when left out)");
  app.footer("Prints PORT/PROTO -> HOST:HOST_PORT for each exposed port (HOST:HOST_PORT alone for "
             "one port, a URL where the backend gives one per port); exit 3 for a port the "
             "sandbox does not expose (docs/ports.md).");
  runner = [args](Context& context) { return run_port(context, *args); };
}

} // namespace sandboxer::commands
