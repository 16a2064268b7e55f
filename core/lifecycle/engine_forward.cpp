// `sandboxer forward`: a sandbox's exposed ports brought to this machine's loopback for as long
// as the command runs and the sandbox lives (docs/ports.md), each forward a history entry.
#include <set>

#include <sandboxer/interrupt.hpp>
#include <sandboxer/ports.hpp>

#include "core/errors.hpp"
#include "core/forward/relay.hpp"
#include "core/lifecycle/engine_internal.hpp"

namespace sandboxer {
using namespace engine_internal;
using namespace lifecycle_rules;

namespace {

// How often a forward looks at the ledger to learn that its sandbox ended.
constexpr auto k_look_at_ledger = std::chrono::seconds(2);

// A binding this machine already serves at 127.0.0.1:`local`: nothing to relay.
bool already_here(const PortBinding& binding, int local) {
  return binding.host_port == local &&
         (connect_host(binding.host) == "127.0.0.1" || binding.host == "localhost");
}

nlohmann::json forwards_json(const std::vector<PortForward>& ports) {
  nlohmann::json listed = nlohmann::json::array();
  for (const auto& forward : ports) {
    listed.push_back({{"port", forward.binding.port},
                      {"protocol", forward.binding.protocol},
                      {"local", fmt::format("127.0.0.1:{}", forward.local_port)},
                      {"to", forward.binding.url}});
  }
  return listed;
}

} // namespace

ForwardPlan Engine::plan_forward(const std::string& id_or_name,
                                 const std::vector<ForwardAsk>& asks) {
  ForwardPlan plan;
  plan.record = get(id_or_name);
  const SandboxRecord& record = plan.record;
  if (record.state != State::running) {
    throw ConflictError(fmt::format("sandbox {} is {}, not running: forward needs a running "
                                    "sandbox{}",
                                    record.id, to_string(record.state), not_running_hint(record)));
  }
  const Capabilities caps = m_drivers.find(record.driver).capabilities();
  plan.reach = caps.port_reach;
  std::vector<ForwardAsk> wanted = asks;
  if (wanted.empty()) {
    for (const auto& binding : record.ports) {
      if (binding.protocol == "tcp") {
        wanted.push_back({binding.port, "tcp", std::nullopt});
      }
    }
    if (wanted.empty()) {
      throw NotFoundError(fmt::format("sandbox {} has no tcp port to forward ({}); its profile's "
                                      "`ports:` says which it exposes",
                                      record.id, exposed_ports_text(record.ports)));
    }
  }
  std::set<int> locals;
  for (const auto& ask : wanted) {
    if (ask.protocol != "tcp") {
      throw UsageError(
          fmt::format("forward {}/{}: forward carries tcp only", ask.port, ask.protocol));
    }
    auto binding = std::find_if(record.ports.begin(), record.ports.end(), [&](const auto& b) {
      return b.port == ask.port && b.protocol == ask.protocol;
    });
    if (binding == record.ports.end()) {
      throw NotFoundError(fmt::format("sandbox {} does not expose port {}/{} ({}); its profile's "
                                      "`ports:` says which it does",
                                      record.id, ask.port, ask.protocol,
                                      exposed_ports_text(record.ports)));
    }
    PortForward forward{ask.local_port.value_or(ask.port), *binding};
    if (plan.reach != Capabilities::PortReach::public_url) {
      if (forward.local_port == 0) {
        forward.local_port = free_port("tcp", "127.0.0.1");
      } else if (!(plan.reach == Capabilities::PortReach::this_machine &&
                   already_here(*binding, forward.local_port))) {
        if (auto why = port_unavailable("tcp", "127.0.0.1", forward.local_port)) {
          throw ConflictError(fmt::format("forward {}: local port 127.0.0.1:{} is {}; pick "
                                          "another (LOCAL:{}), or 0:{} for any free one",
                                          ask.port, forward.local_port, *why, ask.port, ask.port));
        }
      }
      if (!locals.insert(forward.local_port).second) {
        throw UsageError(fmt::format("forward: local port {} is asked twice", forward.local_port));
      }
    }
    plan.ports.push_back(std::move(forward));
  }
  return plan;
}

void Engine::forward(const ForwardPlan& plan, ForwardIo& watcher) {
  const std::string id = plan.record.id;
  if (plan.reach == Capabilities::PortReach::public_url) {
    return; // the URLs are the answer: nothing comes through this machine
  }
  Opened opened = open_driver(plan.record);
  const TimePoint began = m_clock.now();
  update(id, [&](SandboxRecord& r) {
    r.transition(
        EventKind::ports_forwarded, r.state, began, m_actor,
        fmt::format("{} port(s) forwarded to this machine", plan.ports.size()),
        {{"ports", forwards_json(plan.ports)},
         {"host", host_name()},
         {"until", r.expires_at ? nlohmann::json(format_time(*r.expires_at)) : nlohmann::json()}});
  });

  // The sandbox's end ends the forward: looked up in the ledger every few seconds.
  class Watch : public ForwardIo {
  public:
    Watch(Engine& engine, const std::string& id, ForwardIo& out)
        : m_engine(engine), m_id(id), m_out(out) {}
    void listening(const PortForward& port) override { m_out.listening(port); }
    void notice(std::string_view what) override { m_out.notice(what); }
    bool keep_going() override {
      const auto now = std::chrono::steady_clock::now();
      if (now - m_looked < k_look_at_ledger) {
        return m_live;
      }
      m_looked = now;
      SandboxRecord record = m_engine.get(m_id);
      m_live = record.state == State::running &&
               (!record.expires_at || m_engine.m_clock.now() < *record.expires_at);
      if (!m_live) {
        m_ended = fmt::format("sandbox {} is {}", record.id,
                              record.state == State::running ? "past its deadline"
                                                             : to_string(record.state));
      }
      return m_live && m_out.keep_going();
    }
    bool live() const { return m_live; }
    const std::string& ended() const { return m_ended; }

  private:
    Engine& m_engine;
    std::string m_id;
    ForwardIo& m_out;
    std::chrono::steady_clock::time_point m_looked{};
    bool m_live = true;
    std::string m_ended;
  } watch(*this, id, watcher);

  auto record_end = [&](const std::string& how) {
    interrupt::Shield recording;
    try {
      SandboxRecord now = get(id);
      if (!is_live(now.state)) {
        return; // its destroy ended the forward with everything else
      }
      update(id, [&](SandboxRecord& r) {
        r.transition(
            EventKind::ports_forward_ended, r.state, m_clock.now(), m_actor,
            fmt::format("forward of {} port(s) ended: {}", plan.ports.size(), how),
            {{"ports", forwards_json(plan.ports)},
             {"how", how},
             {"seconds", std::chrono::duration_cast<Seconds>(m_clock.now() - began).count()}});
      });
    } catch (const Error& e) {
      spdlog::warn("forward: could not record its end in sandbox {}: {}", id, e.what());
    }
  };
  try {
    if (plan.reach == Capabilities::PortReach::through_driver) {
      opened.driver->forward(handle_of(plan.record), plan.ports, watch);
    } else {
      std::vector<PortForward> relayed;
      for (const auto& forward : plan.ports) {
        if (already_here(forward.binding, forward.local_port)) {
          watch.listening(forward);
        } else {
          relayed.push_back(forward);
        }
      }
      if (relayed.empty()) {
        while (watch.keep_going()) {
          interrupt::sleep_for(std::chrono::milliseconds(500));
        }
      } else {
        forward::relay(relayed, watch);
      }
    }
  } catch (const Interrupted& e) {
    record_end(fmt::format("interrupted by {}", interrupt::signal_name(e.signal())));
    throw;
  } catch (const DriverError& e) {
    record_end(fmt::format("failed: {}", log::redact(e.what())));
    if (e.kind() == DriverError::Kind::conflict) {
      throw ConflictError(e.what());
    }
    throw;
  } catch (const Error& e) {
    record_end(fmt::format("failed: {}", log::redact(e.what())));
    throw;
  }
  if (watch.live()) {
    record_end("stopped");
  } else {
    watcher.notice(fmt::format("forward: {}; the forward ends with it", watch.ended()));
  }
}

} // namespace sandboxer
