// The lease of a sandbox held by a process (`sandboxer run`, docs/run.md): renewed without a
// history entry, ended by one.
#include "core/errors.hpp"
#include "core/lifecycle/engine_internal.hpp"

namespace sandboxer {
using namespace engine_internal;

namespace {

void check_lease_length(Seconds duration) {
  if (duration < Seconds(1)) {
    throw UsageError(
        fmt::format("--lease {}: a lease must last at least 1s", format_duration(duration)));
  }
}

} // namespace

TimePoint Engine::renew_lease(const std::string& id) {
  TimePoint deadline;
  update(id, [&](SandboxRecord& r) {
    if (!r.lease || r.lease->holder != m_actor || r.state != State::running) {
      throw ConflictError(
          fmt::format("sandbox {} is no longer held by this process ({}): {}", r.id, m_actor,
                      r.state != State::running ? fmt::format("it is {}", to_string(r.state))
                      : r.lease                 ? fmt::format("{} holds it now", r.lease->holder)
                                                : std::string("its lease was released")));
    }
    const TimePoint now = m_clock.now();
    r.lease->renewed_at = now;
    r.lease->renewals += 1;
    deadline = lease_deadline(*r.lease, now);
    r.expires_at = deadline;
  });
  return deadline;
}

SandboxRecord Engine::take_lease(const std::string& id, Seconds duration) {
  check_lease_length(duration);
  return update(id, [&](SandboxRecord& r) {
    if (!is_live(r.state)) {
      throw ConflictError(
          fmt::format("sandbox {} is {}: there is nothing to hold", r.id, to_string(r.state)));
    }
    const TimePoint now = m_clock.now();
    Lease lease;
    lease.holder = m_actor;
    lease.duration = duration;
    lease.acquired_at = now;
    lease.renewed_at = now;
    lease.ttl_expires_at = ttl_deadline(r);
    if (r.lease && r.lease->holder != m_actor) {
      // The former holder's lease ends here, in the history, as a release would end it.
      r.transition(EventKind::lease_ended, r.state, now, m_actor,
                   fmt::format("lease taken over from {}", r.lease->holder),
                   lease_summary(*r.lease, now, "taken over"));
    }
    r.expires_at = lease_deadline(lease, now);
    r.lease = lease;
  });
}

SandboxRecord Engine::release_lease(const std::string& id, const std::string& how) {
  return update(id, [&](SandboxRecord& r) {
    if (!r.lease || r.lease->holder != m_actor) {
      return;
    }
    const TimePoint now = m_clock.now();
    r.expires_at = r.lease->ttl_expires_at;
    r.transition(EventKind::lease_ended, r.state, now, m_actor,
                 fmt::format("lease {} after {} renewal(s)", how, r.lease->renewals),
                 lease_summary(*r.lease, now, how));
    r.lease.reset();
  });
}

} // namespace sandboxer
