#pragma once
// Helpers for drivers and the core about exposed ports (docs/ports.md).

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <sandboxer/driver.hpp>

namespace sandboxer {

// The port number `text` spells: 1 to 65535 in decimal digits alone; nullopt for anything else.
std::optional<int> port_number(std::string_view text);

// For a backend that serves ports from hosts of its own (a cloud's proxy or tunnel): udp, a
// host_port or a bind other than the default mean nothing there, and are refused (invalid_spec)
// rather than ignored. `driver` and `how` ("Modal reaches ... through ...") name it in the error.
void refuse_host_side_ports(std::string_view driver, std::string_view how,
                            const std::vector<PortSpec>& ports);

// A port reached at `host`:`host_port` of a host, its url made by port_url.
PortBinding host_binding(int port, std::string protocol, std::string host, int host_port);

// Where a client on this machine connects to a port bound at `host`: a bind to every address
// (0.0.0.0,
// ::) is reached on loopback (127.0.0.1, ::1); any other host is itself.
std::string connect_host(const std::string& host);

// "it exposes 8080/tcp, 53/udp" ("it exposes none"), for messages about a port a sandbox lacks.
std::string exposed_ports_text(const std::vector<PortBinding>& ports);

// "tcp://127.0.0.1:49153": where a client on the host connects (a bind to every address is reached
// on loopback). The binding must have a host port.
std::string port_url(const PortBinding& binding);

// Whether a TCP connection to `host` (an address or a name) and `port` opens within `timeout`
// and is not ended by the other side within the next 200 ms (a relay such as docker-proxy accepts,
// then closes when nothing listens behind it); closed again then. A wildcard host (0.0.0.0, ::)
// is tried on loopback.
bool tcp_answers(const std::string& host, int port, std::chrono::milliseconds timeout);

// Whether `address` (an IP literal) is one of this machine's, or 0.0.0.0 or :: (all of them).
bool is_local_address(const std::string& address);

// Whether `address`:`port` of `protocol` is taken on this machine now: "in use by docker-proxy (pid
// 812)" where the holder can be found, "in use" where not; nullopt when it is free (or when only
// the backend can tell, e.g. a port below 1024 that a root daemon may bind).
std::optional<std::string> port_unavailable(const std::string& protocol, const std::string& address,
                                            int port);

// A port of `protocol` free on `address` now, as the kernel picks one (for a backend that must be
// told a host port, such as QEMU's forwards). Throws DriverError when there is none.
int free_port(const std::string& protocol, const std::string& address);

// The JSON forms of ports, one for the ledger (CreationPolicy::ports), the driver protocol and the
// public output alike: {port, protocol, host_port, bind} as asked, {port, protocol, host,
// host_port, url} as made.
nlohmann::json port_specs_json(const std::vector<PortSpec>& ports);
std::vector<PortSpec> port_specs_from_json(const nlohmann::json& ports);
nlohmann::json port_bindings_json(const std::vector<PortBinding>& ports);

} // namespace sandboxer
