#pragma once
// Helpers for drivers and the core about exposed ports (docs/ports.md).

#include <optional>
#include <string>
#include <string_view>

#include <sandboxer/driver.hpp>

namespace sandboxer {

// The port number `text` spells: 1 to 65535 in decimal digits alone; nullopt for anything else.
std::optional<int> port_number(std::string_view text);

// A port reached at `host`:`host_port` of a host, its url made by port_url.
PortBinding host_binding(int port, std::string protocol, std::string host, int host_port);

// "tcp://127.0.0.1:49153": where a client on the host connects (a bind to every address is reached
// on loopback). The binding must have a host port.
std::string port_url(const PortBinding& binding);

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
