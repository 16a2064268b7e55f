#include "drivers/modal/api_client.hpp"

#include <algorithm>
#include <fmt/format.h>
#include <random>

#include <sandboxer/interrupt.hpp>
#include <sandboxer/log.hpp>

#include "modal_proto/api.pb.h"

namespace sandboxer::drivers::modal {
namespace {

using Kind = DriverError::Kind;

// The longest pause a server's retry-after may impose on one call.
constexpr auto k_max_throttle = std::chrono::seconds(30);

std::shared_ptr<grpc::Channel> open_channel(const std::string& url) {
  const bool tls = url.starts_with("https://");
  std::string target = url.substr(tls ? 8 : 7);
  target = target.substr(0, target.find('/'));
  const bool has_port = target.starts_with("[") ? target.find("]:") != std::string::npos
                                                : target.find(':') != std::string::npos;
  if (!has_port) {
    target += tls ? ":443" : ":80";
  }
  grpc::ChannelArguments args;
  // What Modal's SDKs set: large messages, and keepalive so that an idle exec stream is not
  // dropped by a proxy (modal-client issue #4121).
  args.SetMaxReceiveMessageSize(100 << 20);
  args.SetMaxSendMessageSize(100 << 20);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // The retries are ours (with Modal's metadata); grpc's own would double them.
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
  // TLS is verified against the system's CAs (grpc reads GRPC_DEFAULT_SSL_ROOTS_FILE_PATH
  // when it is set, which is how the tests trust their throwaway CA).
  auto credentials = tls ? grpc::SslCredentials(grpc::SslCredentialsOptions())
                         : grpc::InsecureChannelCredentials();
  return grpc::CreateCustomChannel(target, credentials, args);
}

std::chrono::milliseconds backoff(int attempt) {
  auto delay = std::chrono::milliseconds(100) * (1 << std::min(attempt - 1, 10));
  return std::min<std::chrono::milliseconds>(delay, std::chrono::seconds(1));
}

// RPCRetryPolicy.retry_after_secs from grpc-status-details-bin, when the server sent one.
std::optional<std::chrono::milliseconds> retry_after(const grpc::Status& status) {
  if (status.error_details().empty()) {
    return std::nullopt;
  }
  ::modal::client::RPCStatus details;
  if (!details.ParseFromString(status.error_details())) {
    return std::nullopt;
  }
  for (const auto& any : details.details()) {
    ::modal::client::RPCRetryPolicy policy;
    if (any.UnpackTo(&policy) && policy.retry_after_secs() >= 0) {
      auto ms = std::chrono::milliseconds(static_cast<long long>(policy.retry_after_secs() * 1000));
      return std::min<std::chrono::milliseconds>(ms, k_max_throttle);
    }
  }
  return std::nullopt;
}

std::string words_of(const grpc::Status& status) {
  std::string text = status.error_message();
  if (text.size() > 300) {
    text = text.substr(0, 300) + "...";
  }
  return log::redact(text.empty() ? "(no message)" : text);
}

} // namespace

std::string random_uuid() {
  static thread_local std::mt19937_64 engine{std::random_device{}()};
  std::uniform_int_distribution<unsigned> nibble(0, 15);
  std::string out;
  for (int i = 0; i < 32; ++i) {
    unsigned value = nibble(engine);
    if (i == 12) {
      value = 4;
    } else if (i == 16) {
      value = 8 | (value & 3);
    }
    out += "0123456789abcdef"[value];
    if (i == 7 || i == 11 || i == 15 || i == 19) {
      out += '-';
    }
  }
  return out;
}

Calls::Calls(const Spec& spec, const std::string& url, Token token, std::string bearer)
    : m_spec(spec), m_url(url), m_token(std::move(token)), m_bearer(std::move(bearer)),
      m_channel(open_channel(url)) {}

bool Calls::retryable(grpc::StatusCode code) {
  return code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::DEADLINE_EXCEEDED ||
         code == grpc::StatusCode::CANCELLED || code == grpc::StatusCode::INTERNAL ||
         code == grpc::StatusCode::UNKNOWN;
}

void Calls::prepare(grpc::ClientContext& context, std::chrono::milliseconds timeout) const {
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  if (m_bearer.empty()) {
    context.AddMetadata("x-modal-token-id", m_token.id);
    context.AddMetadata("x-modal-token-secret", m_token.secret);
  } else {
    context.AddMetadata("authorization", "Bearer " + m_bearer);
  }
  context.AddMetadata("x-modal-client-type", std::to_string(m_spec.client_type));
  context.AddMetadata("x-modal-client-version", m_spec.client_version);
}

void Calls::unary(const char* rpc, std::chrono::milliseconds timeout,
                  const std::function<grpc::Status(grpc::ClientContext&)>& attempt, bool retry,
                  const std::function<bool()>& settled) const {
  const std::string key = random_uuid();
  const auto started = std::chrono::steady_clock::now();
  const int attempts = retry ? m_spec.attempts : 1;
  for (int n = 1;; ++n) {
    interrupt::check();
    grpc::ClientContext context;
    prepare(context, timeout);
    context.AddMetadata("x-idempotency-key", key);
    context.AddMetadata("x-retry-attempt", std::to_string(n - 1));
    context.AddMetadata("x-throttle-retry-attempt", std::to_string(n - 1));
    if (n > 1) {
      auto elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - started);
      context.AddMetadata("x-retry-delay", fmt::format("{:.3f}", elapsed.count()));
    }
    grpc::Status status = attempt(context);
    if (status.ok()) {
      return;
    }
    auto server_wait = retry_after(status);
    if (n >= attempts || !(retryable(status.error_code()) || server_wait)) {
      throw error(rpc, status);
    }
    auto delay = server_wait.value_or(backoff(n));
    spdlog::debug("modal: {} failed ({}); attempt {} of {} in {} ms", rpc, words_of(status), n + 1,
                  attempts, delay.count());
    interrupt::sleep_for(delay);
    if (settled && settled()) {
      spdlog::debug("modal: {}: the lost attempt took effect; not repeating it", rpc);
      return;
    }
  }
}

DriverError Calls::error(const char* rpc, const grpc::Status& status) const {
  const std::string words = words_of(status);
  switch (status.error_code()) {
  case grpc::StatusCode::UNAUTHENTICATED:
  case grpc::StatusCode::PERMISSION_DENIED:
    return DriverError(Kind::auth,
                       fmt::format("Modal refused the token at {} ({}: {}); check the profile's "
                                   "secrets token_id and token_secret (modal token new makes a "
                                   "pair)",
                                   m_url, rpc, words));
  case grpc::StatusCode::NOT_FOUND:
    return DriverError(Kind::not_found, fmt::format("Modal {}: not found: {}", rpc, words));
  case grpc::StatusCode::RESOURCE_EXHAUSTED:
    return DriverError(Kind::refused,
                       fmt::format("Modal {} refused by the workspace's limits: {}", rpc, words));
  case grpc::StatusCode::DEADLINE_EXCEEDED:
    return DriverError(Kind::timeout,
                       fmt::format("Modal {} at {} did not answer in time: {}", rpc, m_url, words));
  case grpc::StatusCode::ALREADY_EXISTS:
    return DriverError(Kind::conflict, fmt::format("Modal {}: {}", rpc, words));
  case grpc::StatusCode::INVALID_ARGUMENT:
  case grpc::StatusCode::FAILED_PRECONDITION:
    return DriverError(Kind::error, fmt::format("Modal {} refused the request: {}", rpc, words));
  case grpc::StatusCode::UNAVAILABLE:
    return DriverError(Kind::error,
                       fmt::format("cannot reach Modal at {} ({}): {}", m_url, rpc, words));
  default:
    return DriverError(Kind::error, fmt::format("Modal {} at {} failed: {}", rpc, m_url, words));
  }
}

} // namespace sandboxer::drivers::modal
