// sandboxer-fake-modal: a local server on Modal's protos for the modal driver's tests.
// Usage: sandboxer-fake-modal --state-dir DIR [--tls-cert PEM --tls-key PEM] [--task-polls N]
//   [--build-polls N] [--snapshot-delay SECS] [--max-sandboxes N] [--no-router]
//   [--fail RPC:N:CODE] [--retry-after RPC:SECS] [--hang RPC:SECS] [--lose RPC]
// Prints PORT=<n> once it serves on 127.0.0.1; tokens from FAKE_MODAL_TOKEN_ID/_SECRET.

#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "services.hpp"

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

grpc::StatusCode code_named(const std::string& name) {
  static const std::map<std::string, grpc::StatusCode> k_codes = {
      {"CANCELLED", grpc::CANCELLED},
      {"UNKNOWN", grpc::UNKNOWN},
      {"INVALID_ARGUMENT", grpc::INVALID_ARGUMENT},
      {"DEADLINE_EXCEEDED", grpc::DEADLINE_EXCEEDED},
      {"NOT_FOUND", grpc::NOT_FOUND},
      {"PERMISSION_DENIED", grpc::PERMISSION_DENIED},
      {"RESOURCE_EXHAUSTED", grpc::RESOURCE_EXHAUSTED},
      {"INTERNAL", grpc::INTERNAL},
      {"UNAVAILABLE", grpc::UNAVAILABLE},
      {"UNAUTHENTICATED", grpc::UNAUTHENTICATED},
      {"UNIMPLEMENTED", grpc::UNIMPLEMENTED}};
  auto found = k_codes.find(name);
  if (found == k_codes.end()) {
    std::cerr << "unknown status code " << name << "\n";
    std::exit(2);
  }
  return found->second;
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ':');) {
    parts.push_back(part);
  }
  return parts;
}

} // namespace

int main(int argc, char** argv) {
  fake_modal::Options options;
  std::string cert, key;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << arg << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--state-dir") {
      options.state_dir = next();
    } else if (arg == "--tls-cert") {
      cert = read_file(next());
    } else if (arg == "--tls-key") {
      key = read_file(next());
    } else if (arg == "--task-polls") {
      options.task_polls = std::stoi(next());
    } else if (arg == "--build-polls") {
      options.build_polls = std::stoi(next());
    } else if (arg == "--snapshot-delay") {
      options.snapshot_delay = std::stod(next());
    } else if (arg == "--max-sandboxes") {
      options.max_sandboxes = std::stoi(next());
    } else if (arg == "--no-router") {
      options.router = false;
    } else if (arg == "--fail" || arg == "--retry-after" || arg == "--hang" || arg == "--lose") {
      auto parts = split(next());
      auto& fault = options.faults[parts.at(0)];
      fault.remaining = 1;
      if (arg == "--fail") {
        fault.remaining = std::stoi(parts.at(1));
        fault.code = code_named(parts.at(2));
      } else if (arg == "--lose") {
        fault.lose = true;
      } else if (arg == "--retry-after") {
        fault.retry_after = std::stod(parts.at(1));
      } else {
        fault.hang = std::stod(parts.at(1));
      }
    } else {
      std::cerr << "unknown argument " << arg << "\n";
      return 2;
    }
  }
  if (options.state_dir.empty()) {
    std::cerr << "--state-dir is required\n";
    return 2;
  }
  if (const char* id = std::getenv("FAKE_MODAL_TOKEN_ID")) {
    options.token_id = id;
  }
  if (const char* secret = std::getenv("FAKE_MODAL_TOKEN_SECRET")) {
    options.token_secret = secret;
  }
  std::signal(SIGPIPE, SIG_IGN);
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr); // grpc's threads inherit it; main waits for them

  const bool tls = !cert.empty() && !key.empty();
  fake_modal::World world(options);
  auto control = fake_modal::control_plane(world);
  auto router = fake_modal::command_router(world);
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (tls) {
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({key, cert});
    credentials = grpc::SslServerCredentials(ssl);
  }
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", credentials, &port);
  builder.RegisterService(control.get());
  builder.RegisterService(router.get());
  auto server = builder.BuildAndStart();
  if (!server || port == 0) {
    std::cerr << "cannot listen on 127.0.0.1\n";
    return 1;
  }
  world.options().router_url =
      (tls ? "https://127.0.0.1:" : "http://127.0.0.1:") + std::to_string(port);
  std::cout << "PORT=" << port << std::endl;
  int signal = 0;
  sigwait(&stop, &signal);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  return 0;
}
