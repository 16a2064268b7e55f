// What the backends say of live records, for `list`: one listing per backend, not one status call
// per sandbox.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <sandboxer/error.hpp>
#include <sandboxer/log.hpp>

#include "core/lifecycle/lifecycle.hpp"

namespace sandboxer {
namespace {

// A backend's own word for a resource, as one of BackendStatus's states.
BackendStatus::State state_of_word(const std::string& word) {
  if (word == "running" || word == "restarting") {
    return BackendStatus::State::running;
  }
  if (word == "paused") {
    return BackendStatus::State::paused;
  }
  if (word == "exited" || word == "dead" || word == "created" || word == "stopped") {
    return BackendStatus::State::stopped;
  }
  return BackendStatus::State::unknown;
}

} // namespace

std::string backend_key(const std::string& driver, const nlohmann::json& spec,
                        const nlohmann::json& location) {
  return driver + "\n" + spec.dump() + "\n" + location.dump();
}

std::map<std::string, BackendStatus>
Engine::backend_states(const std::vector<SandboxRecord>& records, const std::string& ledger_id) {
  std::map<std::string, std::vector<const SandboxRecord*>> groups;
  for (const auto& record : records) {
    if (!is_live(record.state) || record.backend_id.empty() || paused_without_resource(record) ||
        !m_drivers.find(record.driver).capabilities().list_by_label) {
      continue;
    }
    groups[backend_key(record)].push_back(&record);
  }
  std::map<std::string, BackendStatus> states;
  for (const auto& [key, members] : groups) {
    std::map<std::string, std::string> listed; // backend id -> the backend's word
    try {
      for (auto& resource : list_remote(*members.front(), {{"sandboxer.ledger", ledger_id}})) {
        listed[resource.backend_id] = resource.state;
      }
    } catch (const std::exception& e) {
      spdlog::warn("cannot ask the {} backend of {} (and {} more): {}", members.front()->driver,
                   members.front()->id, members.size() - 1, log::redact(e.what()));
      continue;
    }
    for (const auto* record : members) {
      auto found = listed.find(record->backend_id);
      states[record->id] = found == listed.end()
                               ? BackendStatus{BackendStatus::State::missing, "not listed"}
                               : BackendStatus{state_of_word(found->second), found->second};
    }
  }
  return states;
}

std::optional<std::string> backend_disagrees(State recorded, BackendStatus::State backend) {
  if (recorded == State::paused) {
    // A pause is a freeze or a stop, whichever the driver made: either agrees.
    return backend == BackendStatus::State::running || backend == BackendStatus::State::missing
               ? std::optional<std::string>(to_string(backend))
               : std::nullopt;
  }
  if (recorded != State::running && recorded != State::expired && recorded != State::pooled) {
    return std::nullopt;
  }
  switch (backend) {
  case BackendStatus::State::stopped:
  case BackendStatus::State::paused:
  case BackendStatus::State::missing:
    return std::string(to_string(backend));
  case BackendStatus::State::running:
  case BackendStatus::State::unknown:
    break;
  }
  return std::nullopt;
}

} // namespace sandboxer
