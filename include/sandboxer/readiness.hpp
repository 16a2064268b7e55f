#pragma once
// Whether an exposed port at a public URL answers (`ready: {port}`, docs/ports.md), for drivers
// whose ports are reached through a proxy of the backend's own
// (Capabilities::PortReach::public_url).

#include <chrono>
#include <string>

#include <sandboxer/http.hpp>

namespace sandboxer {

// Whether a proxy's HTTP status says the service behind it answered: anything but 502, 503 and
// 504, which a proxy answers itself while nothing listens on the port (E2B's answers 502).
bool proxied_status_answers(long status);

// Whether a GET of `url` through `transport` gets an answer the service gave
// (proxied_status_answers) within `timeout`; a connection that fails or times out is no answer.
bool url_answers(http::Transport& transport, const std::string& url,
                 std::chrono::milliseconds timeout);

} // namespace sandboxer
