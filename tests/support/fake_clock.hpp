#pragma once

#include <sandboxer/clock.hpp>

namespace sandboxer::testing {

// A clock that stands still until the test moves it.
class FakeClock : public Clock {
public:
  explicit FakeClock(TimePoint start) : m_now(start) {}
  TimePoint now() const override { return m_now; }
  void advance(std::chrono::seconds by) { m_now += by; }
  void set(TimePoint t) { m_now = t; }

private:
  TimePoint m_now;
};

} // namespace sandboxer::testing
