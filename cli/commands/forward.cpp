// `sandboxer forward`: a sandbox's exposed ports on this machine's loopback while it runs
// (docs/ports.md).
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <iostream>
#include <set>

#include <sandboxer/ports.hpp>

#include "cli/commands/commands.hpp"
#include "core/errors.hpp"

namespace sandboxer::commands {
namespace {

struct ForwardArgs {
  std::string id;
  std::vector<std::string> ports; // [LOCAL:]PORT[/PROTO]
};

// "8080", "18080:8080", "0:8080/tcp".
ForwardAsk ask_of(const std::string& text) {
  ForwardAsk ask;
  std::string rest = text;
  const size_t colon = rest.find(':');
  auto bad = [&] {
    return UsageError(fmt::format("forward \"{}\": expected [LOCAL:]PORT[/PROTO], PORT from 1 to "
                                  "65535, LOCAL from 0 (any free port) to 65535 (e.g. 8080, "
                                  "18080:8080, 0:5432)",
                                  text));
  };
  if (colon != std::string::npos) {
    const std::string local = rest.substr(0, colon);
    if (local == "0") {
      ask.local_port = 0;
    } else if (auto number = port_number(local)) {
      ask.local_port = *number;
    } else {
      throw bad();
    }
    rest = rest.substr(colon + 1);
  }
  const size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    ask.protocol = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
    if (ask.protocol != "tcp" && ask.protocol != "udp") {
      throw bad();
    }
  }
  auto port = port_number(rest);
  if (!port) {
    throw bad();
  }
  ask.port = *port;
  return ask;
}

nlohmann::json forward_json(const ForwardPlan& plan) {
  const bool proxied = plan.reach != Capabilities::PortReach::public_url;
  nlohmann::json forwards = nlohmann::json::array();
  for (const auto& forward : plan.ports) {
    forwards.push_back(
        {{"port", forward.binding.port},
         {"protocol", forward.binding.protocol},
         {"local_host", proxied ? nlohmann::json("127.0.0.1") : nlohmann::json()},
         {"local_port", proxied ? nlohmann::json(forward.local_port) : nlohmann::json()},
         {"url", proxied ? nlohmann::json(fmt::format("tcp://127.0.0.1:{}", forward.local_port))
                         : nlohmann::json(forward.binding.url)},
         {"to", forward.binding.url}});
  }
  return {{"id", plan.record.id}, {"proxied", proxied}, {"forwards", forwards}};
}

// Prints where each port is once all of them listen; later news (a reconnect) goes to stderr.
class Printer : public ForwardIo {
public:
  Printer(Context& context, const ForwardPlan& plan) : m_context(context), m_plan(plan) {}
  void listening(const PortForward& port) override {
    m_listening.insert(port.local_port);
    if (m_printed) {
      spdlog::info("forward: 127.0.0.1:{} forwards port {}/{} again", port.local_port,
                   port.binding.port, port.binding.protocol);
      return;
    }
    if (m_listening.size() == m_plan.ports.size()) {
      m_printed = true;
      print_plan(m_context, m_plan);
      if (!m_context.out().quiet()) {
        fmt::print(stderr, "forwarding {} port(s) of sandbox {} until Ctrl-C or its end\n",
                   m_plan.ports.size(), m_plan.record.id);
      }
    }
  }
  void notice(std::string_view what) override { fmt::print(stderr, "{}\n", what); }
  bool keep_going() override { return true; }

  static void print_plan(Context& context, const ForwardPlan& plan) {
    context.out().print(forward_json(plan), [&] {
      Table table;
      for (const auto& forward : plan.ports) {
        table.rows.push_back({plan.reach == Capabilities::PortReach::public_url
                                  ? fmt::format("{}/{} -> {}", forward.binding.port,
                                                forward.binding.protocol, forward.binding.url)
                                  : fmt::format("127.0.0.1:{} -> {}/{} ({})", forward.local_port,
                                                forward.binding.port, forward.binding.protocol,
                                                forward.binding.url)});
      }
      return table;
    });
    std::cout.flush();
  }

private:
  Context& m_context;
  const ForwardPlan& m_plan;
  std::set<int> m_listening;
  bool m_printed = false;
};

ExitCode run_forward(Context& context, const ForwardArgs& args) {
  std::vector<ForwardAsk> asks;
  for (const auto& text : args.ports) {
    asks.push_back(ask_of(text));
  }
  ForwardPlan plan = context.engine().plan_forward(args.id, asks);
  if (plan.reach == Capabilities::PortReach::public_url) {
    // Nothing to carry: the service's own URL is where a client connects, from anywhere.
    Printer::print_plan(context, plan);
    return ExitCode::ok;
  }
  Printer printer(context, plan);
  context.engine().forward(plan, printer);
  return ExitCode::ok;
}

} // namespace

void setup_forward(CLI::App& app, Runner& runner) {
  auto args = std::make_shared<ForwardArgs>();
  app.add_option("id", args->id, "Sandbox id or name")->required();
  app.add_option("ports", args->ports,
                 "[LOCAL:]PORT[/PROTO]: the sandbox's PORT on 127.0.0.1:LOCAL (LOCAL: the same "
                 "number when left out, 0 for any free port); none: every exposed tcp port");
  app.footer("Runs until Ctrl-C (exit 130) or the sandbox's end (exit 0). compose-ssh carries the "
             "ports through ssh and reconnects when the connection drops; docker and vm-packer "
             "relay on this machine; e2b and modal print their URLs and exit (docs/ports.md).");
  runner = [args](Context& context) { return run_forward(context, *args); };
}

} // namespace sandboxer::commands
