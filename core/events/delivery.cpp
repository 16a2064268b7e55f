// Delivery from the outbox: per sink, in sequence order, at least once. A sink that fails stops
// its own queue (so a receiver never sees an event before the ones it missed) and leaves the
// others alone.
#include <algorithm>
#include <random>
#include <spdlog/spdlog.h>
#include <thread>
#include <unistd.h>

#include "core/events/events.hpp"

namespace sandboxer::events {
namespace fs = std::filesystem;
using namespace std::chrono;

namespace {

// 0.5s, 1s, 2s, ... at most 30s, each with up to 50% of random jitter so that many senders do
// not retry in step.
milliseconds backoff(int attempt) {
  static thread_local std::mt19937 random{std::random_device{}()};
  milliseconds base =
      std::min<milliseconds>(milliseconds(500) * (1 << std::min(attempt, 6)), milliseconds(30000));
  std::uniform_int_distribution<long long> jitter(0, base.count() / 2);
  return base + milliseconds(jitter(random));
}

} // namespace

Delivery::Delivery(const Outbox& outbox, DeliveryPolicy policy)
    : m_outbox(outbox), m_policy(policy) {}

milliseconds Delivery::time_left() const {
  auto spent = m_spent + (steady_clock::now() - m_pass_started);
  return duration_cast<milliseconds>(m_policy.budget - spent);
}

bool Delivery::out_of_time() const {
  return time_left() <= milliseconds(0);
}

DeliveryCounts Delivery::deliver() {
  std::unique_lock guard(m_mutex, std::try_to_lock);
  DeliveryCounts counts;
  if (!guard.owns_lock()) {
    return counts; // another worker of this process is delivering; it will take ours too
  }
  m_pass_started = steady_clock::now();
  try {
    std::vector<Outbox::Entry> entries = m_outbox.entries();
    if (entries.empty()) {
      return counts;
    }
    std::map<std::string, nlohmann::json> sinks;
    for (const auto& entry : entries) {
      if (!entry.prepared) {
        for (const auto& key : entry.pending_sinks) {
          if (m_outbox.sendable_here(entry.sinks[key])) {
            sinks.emplace(key, entry.sinks[key]);
          }
        }
      }
    }
    DeliveryCounts before = m_totals;
    for (const auto& [key, sink] : sinks) {
      if (out_of_time()) {
        break;
      }
      if (std::find(m_failed_sinks.begin(), m_failed_sinks.end(), key) != m_failed_sinks.end()) {
        continue;
      }
      if (!deliver_to(key, sink, entries)) {
        m_failed_sinks.push_back(key);
      }
    }
    // An event leaves the outbox once every sink it names is past it.
    std::map<std::string, std::uint64_t> cursors;
    std::vector<const Outbox::Entry*> delivered;
    for (const auto& entry : entries) {
      bool done = !entry.prepared;
      bool waits_here = entry.prepared;
      for (const auto& [key, sink] : entry.sinks.items()) {
        auto it = cursors.find(key);
        if (it == cursors.end()) {
          it = cursors.emplace(key, m_outbox.cursor(key)).first;
        }
        if (it->second < entry.sequence) {
          done = false;
          waits_here = waits_here || m_outbox.sendable_here(sink);
        }
      }
      if (done) {
        delivered.push_back(&entry);
      } else if (waits_here) {
        ++counts.pending;
      } else {
        ++counts.elsewhere;
      }
    }
    m_outbox.remove(delivered);
    counts.delivered = m_totals.delivered - before.delivered;
    counts.failed = m_totals.failed - before.failed;
  } catch (const std::exception& e) {
    spdlog::warn("events: delivery stopped: {}", e.what());
  }
  m_spent += steady_clock::now() - m_pass_started;
  m_totals.pending = counts.pending;
  m_totals.elsewhere = counts.elsewhere;
  return counts;
}

// Sends the events of `key` past its cursor, in order. Returns false when the sink failed.
bool Delivery::deliver_to(const std::string& key, const nlohmann::json& sink,
                          std::vector<Outbox::Entry>& entries) {
  const milliseconds per_send = timeout_of(sink);
  // A lifecycle command does not wait long for another's turn: that one is sending, and what it
  // does not take waits for the next command; that wait is the command's, across its passes and
  // sinks. `events flush` waits as long as it may.
  const auto waiting_since = steady_clock::now();
  const auto give_up =
      waiting_since + (m_policy.retry ? time_left() : std::min(time_left(), m_turn_wait_left));
  std::unique_ptr<Outbox::SinkTurn> turn;
  while (!(turn = m_outbox.take_sink(key, std::min(per_send, time_left())))) {
    if (out_of_time() || steady_clock::now() >= give_up) {
      break;
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
  if (!m_policy.retry) {
    auto waited = duration_cast<milliseconds>(steady_clock::now() - waiting_since);
    m_turn_wait_left -= std::min(m_turn_wait_left, waited);
  }
  if (!turn) {
    return true; // someone else is delivering it: not this sink's failure
  }
  auto turn_lost = [&] {
    spdlog::warn("events: the turn to send to {} passed to another process while this one was "
                 "slow; that one goes on from the last event recorded as sent",
                 describe_sink(sink));
    return true;
  };
  std::uint64_t cursor = m_outbox.cursor(key);
  for (auto& entry : entries) {
    if (entry.prepared || entry.sequence <= cursor || !entry.sinks.contains(key)) {
      continue;
    }
    std::string text = entry.event.dump();
    for (int attempt = 0;; ++attempt) {
      if (out_of_time()) {
        return true;
      }
      auto sent = steady_clock::now();
      SendResult result = send(sink, text, std::min(per_send, time_left()));
      spdlog::debug("timing: event {} to {} {:.1f} ms", entry.event.value("id", "?"),
                    describe_sink(sink),
                    duration<double, std::milli>(steady_clock::now() - sent).count());
      if (result.ok) {
        ++m_totals.delivered;
        break;
      }
      ++m_totals.failed;
      spdlog::warn("events: {} to {}: {}", entry.event.value("id", "?"), describe_sink(sink),
                   result.error);
      if (!m_policy.retry || !result.retryable || attempt >= retries_of(sink)) {
        return false;
      }
      milliseconds wait = result.retry_after.value_or(backoff(attempt));
      if (wait >= time_left()) {
        return false;
      }
      if (!turn->renew(wait + per_send)) {
        return turn_lost();
      }
      std::this_thread::sleep_for(wait);
    }
    cursor = entry.sequence;
    if (!turn->advance(cursor, per_send)) {
      return turn_lost();
    }
    std::erase(entry.pending_sinks, key);
  }
  return true;
}

} // namespace sandboxer::events
