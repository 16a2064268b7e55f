// saas-stub: an external sandboxer driver written with the C++ SDK (include/sandboxer/), for a
// pretend SaaS sandbox service (fake_saas.py beside it). It shows what a real SaaS driver needs:
// the API key taken from `secrets` and sent only in the Authorization header, retries with backoff
// on 429/503 and connection failures, 404 reported as not_found, and a profile section validated
// with a pointer to the offending key.
#include <chrono>
#include <fmt/format.h>
#include <thread>
#include <unistd.h>

#include <sandboxer/base64.hpp>
#include <sandboxer/driver.hpp>
#include <sandboxer/duration.hpp>
#include <sandboxer/error.hpp>
#include <sandboxer/http.hpp>
#include <sandboxer/sdk.hpp>

namespace saas_stub {
using namespace sandboxer;
using json = nlohmann::json;
using Kind = DriverError::Kind;

struct Spec {
  std::string api_url;
  int retries = 3;
  std::chrono::milliseconds request_timeout{30'000};
};

Spec bind_spec(const json& section) {
  check_keys(section, {"api_url", "retries", "request_timeout"});
  Spec spec;
  if (!section.contains("api_url") || !section["api_url"].is_string() ||
      !(section["api_url"].get<std::string>().starts_with("http://") ||
        section["api_url"].get<std::string>().starts_with("https://"))) {
    throw SpecError("/api_url", "expected the service's URL (http:// or https://)");
  }
  spec.api_url = section["api_url"].get<std::string>();
  while (spec.api_url.ends_with("/")) {
    spec.api_url.pop_back();
  }
  if (section.contains("retries")) {
    const json& value = section["retries"];
    if (!value.is_number_integer() || value.get<int>() < 0 || value.get<int>() > 10) {
      throw SpecError("/retries", "expected a number of retries from 0 to 10");
    }
    spec.retries = value.get<int>();
  }
  if (section.contains("request_timeout")) {
    auto ms = section["request_timeout"].is_string()
                  ? parse_duration_ms(section["request_timeout"].get<std::string>())
                  : std::nullopt;
    if (!ms || ms->count() <= 0) {
      throw SpecError("/request_timeout", "expected a duration (30s, 2m)");
    }
    spec.request_timeout = *ms;
  }
  return spec;
}

json to_json(const Spec& spec) {
  return {{"api_url", spec.api_url},
          {"retries", spec.retries},
          {"request_timeout", fmt::format("{}ms", spec.request_timeout.count())}};
}

// The service's API: one method per call, retried where a retry is safe.
class Api {
public:
  Api(Spec spec, std::string key) : m_spec(std::move(spec)), m_key(std::move(key)) {}

  // Sends the request; retries 429, 502, 503, 504 and connection failures with exponential
  // backoff. Returns the response of any other status (the caller knows what 404 means).
  http::Response send(const std::string& method, const std::string& path,
                      const json& body = nullptr) const {
    http::Request request;
    request.method = method;
    request.url = m_spec.api_url + path;
    request.timeout = m_spec.request_timeout;
    request.headers = {{"Authorization", "Bearer " + m_key}, {"Accept", "application/json"}};
    if (!body.is_null()) {
      request.headers.emplace_back("Content-Type", "application/json");
      request.body = body.dump();
    }
    auto backoff = std::chrono::milliseconds(100);
    for (int attempt = 0;; ++attempt) {
      try {
        http::Response response = http::curl_transport().send(request);
        bool transient = response.status == 429 || response.status == 502 ||
                         response.status == 503 || response.status == 504;
        if (!transient || attempt >= m_spec.retries) {
          return response;
        }
        fmt::print(stderr, "saas-stub: {} {} -> {}, retrying in {} ms\n", method, path,
                   response.status, backoff.count());
      } catch (const DriverError& e) {
        if (attempt >= m_spec.retries) {
          throw DriverError(Kind::error, fmt::format("saas-stub: {} {}: {} (after {} attempts)",
                                                     method, path, e.what(), attempt + 1));
        }
        fmt::print(stderr, "saas-stub: {} {}: {}, retrying in {} ms\n", method, path, e.what(),
                   backoff.count());
      }
      std::this_thread::sleep_for(backoff);
      backoff *= 2;
    }
  }

  // send() that turns any status but the expected ones into the DriverError it stands for.
  json call(const std::string& method, const std::string& path, const json& body = nullptr,
            const std::string& what = "") const {
    http::Response response = send(method, path, body);
    if (response.status >= 200 && response.status < 300) {
      return response.body.empty() ? json::object() : json::parse(response.body, nullptr, false);
    }
    auto parsed = json::parse(response.body, nullptr, false);
    std::string message = parsed.is_object() ? parsed.value("error", "") : response.body;
    throw DriverError(http::kind_of_status(response.status),
                      fmt::format("saas-stub: {}{}: HTTP {}: {}", what.empty() ? path : what, "",
                                  response.status, message));
  }

private:
  Spec m_spec;
  std::string m_key;
};

class SaasDriver : public Driver {
public:
  explicit SaasDriver(Api api) : m_api(std::move(api)) {}

  CreateResult create(const CreateRequest& request) override {
    json body = {{"name", request.name}, {"labels", request.labels}, {"env", request.env}};
    if (request.expires_at) {
      body["expires_at"] = format_time(*request.expires_at);
    }
    if (request.from_snapshot) {
      body["snapshot"] = *request.from_snapshot;
    }
    json created = m_api.call("POST", "/v1/sandboxes", body, "create " + request.sandbox_id);
    if (!created.is_object() || !created.contains("id") || !created["id"].is_string()) {
      throw DriverError(Kind::error, "saas-stub: create: the service returned no id");
    }
    return {created["id"].get<std::string>(), {{"service", "saas-stub"}}};
  }

  void destroy(const SandboxHandle& sandbox) override {
    // 404 is "already gone": the SDK answers success for a not_found destroy.
    m_api.call("DELETE", "/v1/sandboxes/" + sandbox.backend_id, nullptr,
               "sandbox " + sandbox.backend_id);
  }

  BackendStatus status(const SandboxHandle& sandbox) override {
    http::Response response = m_api.send("GET", "/v1/sandboxes/" + sandbox.backend_id);
    if (response.status == 404) {
      return {BackendStatus::State::missing, "the service has no such sandbox"};
    }
    if (response.status != 200) {
      throw DriverError(http::kind_of_status(response.status),
                        fmt::format("saas-stub: status: HTTP {}", response.status));
    }
    return {BackendStatus::State::running, "running"};
  }

  SnapshotResult snapshot(const SandboxHandle& sandbox, const SnapshotRequest& request) override {
    json made = m_api.call("POST", fmt::format("/v1/sandboxes/{}/snapshots", sandbox.backend_id),
                           {{"name", request.name}}, "sandbox " + sandbox.backend_id);
    SnapshotResult result;
    result.backend_ref = made.value("id", "");
    if (made.contains("size_bytes") && made["size_bytes"].is_number_unsigned()) {
      result.size_bytes = made["size_bytes"].get<std::uint64_t>();
    }
    return result;
  }

  void delete_snapshot(const std::string& backend_ref) override {
    m_api.call("DELETE", "/v1/snapshots/" + backend_ref, nullptr, "snapshot " + backend_ref);
  }

  int exec(const SandboxHandle& sandbox, const ExecRequest& request, ExecIo& io) override {
    // The service takes the whole stdin with the request.
    std::string input;
    if (request.attach_stdin && io.stdin_fd() >= 0) {
      char buffer[65536];
      for (ssize_t n; (n = ::read(io.stdin_fd(), buffer, sizeof buffer)) > 0;) {
        input.append(buffer, static_cast<size_t>(n));
      }
    }
    json body = {{"argv", request.argv}, {"env", request.env}, {"stdin", base64_encode(input)}};
    if (request.workdir) {
      body["workdir"] = *request.workdir;
    }
    json done = m_api.call("POST", fmt::format("/v1/sandboxes/{}/exec", sandbox.backend_id), body,
                           "sandbox " + sandbox.backend_id);
    if (done.contains("error")) {
      return unstartable_command(request.argv.front(), true, io);
    }
    io.out(base64_decode(done.value("stdout", "")));
    io.err(base64_decode(done.value("stderr", "")));
    return done.value("exit_code", 1);
  }

  void extend(const SandboxHandle& sandbox, TimePoint new_deadline) override {
    m_api.call("PATCH", "/v1/sandboxes/" + sandbox.backend_id,
               {{"expires_at", format_time(new_deadline)}}, "sandbox " + sandbox.backend_id);
  }

  std::vector<RemoteResource> list_remote(const Labels& selector) override {
    std::string query;
    for (const auto& [key, value] : selector) {
      query += fmt::format("{}label={}={}", query.empty() ? "?" : "&", key, value);
    }
    json listed = m_api.call("GET", "/v1/sandboxes" + query);
    std::vector<RemoteResource> found;
    for (const auto& item : listed.value("sandboxes", json::array())) {
      RemoteResource resource;
      resource.backend_id = item.value("id", "");
      resource.labels = item.value("labels", json::object()).get<Labels>();
      found.push_back(std::move(resource));
    }
    return found;
  }

private:
  Api m_api;
};

class SaasFactory : public DriverFactory {
public:
  std::string_view name() const override { return "saas-stub"; }
  std::string_view doc() const override {
    return "a pretend SaaS sandbox service over HTTP (C++ SDK example; needs secrets.api_key)";
  }
  Capabilities capabilities() const override {
    Capabilities caps;
    caps.snapshot = true;
    caps.exec = true;
    caps.native_ttl = true;
    caps.list_by_label = true;
    return caps;
  }
  json parse_spec(const json& section) const override {
    return to_json(bind_spec(section.is_null() ? json::object() : section));
  }
  json schema() const override {
    return {{"type", "object"},
            {"additionalProperties", false},
            {"required", {"api_url"}},
            {"properties",
             {{"api_url", {{"type", "string"}, {"pattern", "^https?://"}}},
              {"retries", {{"type", "integer"}, {"minimum", 0}, {"maximum", 10}}},
              {"request_timeout", {{"type", "string"}}}}}};
  }
  std::unique_ptr<Driver> open(const json& spec, const DriverContext& context) const override {
    auto key = context.secrets.find("api_key");
    if (key == context.secrets.end() || key->second.empty()) {
      throw DriverError(Kind::auth, "saas-stub needs secrets.api_key in the profile");
    }
    return std::make_unique<SaasDriver>(Api(bind_spec(spec), key->second));
  }
};

} // namespace saas_stub

int main() {
  static const saas_stub::SaasFactory factory;
  return sandboxer::sdk::serve(factory);
}
