#pragma once

#include <chrono>
#include <functional>
#include <grpcpp/grpcpp.h>
#include <memory>
#include <string>

#include <sandboxer/error.hpp>

#include "drivers/modal/spec.hpp"
#include "modal_proto/api.grpc.pb.h"
#include "modal_proto/task_command_router.grpc.pb.h"

namespace sandboxer::drivers::modal {

// The token, from the profile's secrets. It travels only as the x-modal-token-* metadata.
struct Token {
  std::string id;
  std::string secret;
};

// One channel and the rules every call follows: Modal's metadata, a deadline, and the SDKs'
// retries (UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED, INTERNAL, UNKNOWN; 100 ms doubling to 1 s;
// the server's RPCRetryPolicy.retry_after_secs when it sends one), each attempt carrying the same
// x-idempotency-key. Failures become DriverError with the RPC's name and the server's words.
class Calls {
public:
  // `url`: https://host[:port], or http:// to a loopback host. `bearer`: the command router's
  // JWT (an authorization header instead of the token metadata).
  Calls(const Spec& spec, const std::string& url, Token token, std::string bearer = "");

  const std::string& url() const { return m_url; }
  const Spec& spec() const { return m_spec; }
  std::shared_ptr<grpc::Channel> channel() const { return m_channel; }

  // Runs `attempt(context)` with the metadata and a deadline `timeout` from now, retrying as
  // above; `rpc` names the call in errors. `retry` false: one attempt (a call that must not run
  // twice and carries no idempotency key the server honours).
  // `settled`, when given, is asked before each retry whether an attempt whose answer was lost
  // took effect after all (the create it made is found by its tags): true ends the call.
  void unary(const char* rpc, std::chrono::milliseconds timeout,
             const std::function<grpc::Status(grpc::ClientContext&)>& attempt, bool retry = true,
             const std::function<bool()>& settled = {}) const;

  // A fresh context with the metadata and deadline, for streaming calls the caller drives.
  void prepare(grpc::ClientContext& context, std::chrono::milliseconds timeout) const;

  // The error for a failed call: auth, not found, quota, deadline mapped to DriverError kinds.
  DriverError error(const char* rpc, const grpc::Status& status) const;

  static bool retryable(grpc::StatusCode code);

private:
  const Spec& m_spec;
  std::string m_url;
  Token m_token;
  std::string m_bearer;
  std::shared_ptr<grpc::Channel> m_channel;
};

// A fresh random id (uuid v4 text): idempotency keys, exec ids, snapshot ids.
std::string random_uuid();

} // namespace sandboxer::drivers::modal
