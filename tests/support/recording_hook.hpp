#pragma once

#include <string>
#include <vector>

#include "core/events/events.hpp"
#include "core/lifecycle/lifecycle.hpp"

namespace sandboxer::testing {

// An EventHook that writes nothing: it records "<id>:<state>" and the kinds of new entries in
// order.
class RecordingHook : public EventHook {
public:
  void stage(LedgerStore::Transaction&, SandboxRecord& record, size_t first_new) override {
    for (size_t i = first_new; i < record.history.size(); ++i) {
      seen.push_back(record.id + ":" + to_string(record.history[i].to));
      kinds.push_back(to_string(record.history[i].event));
    }
  }
  void committed() override { ++commits; }
  void deliver() override {}
  std::vector<std::string> seen;
  std::vector<std::string> kinds;
  int commits = 0;
};

} // namespace sandboxer::testing
