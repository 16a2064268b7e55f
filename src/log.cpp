#include <mutex>
#include <spdlog/sinks/base_sink.h>
#include <vector>

#include <sandboxer/log.hpp>

namespace sandboxer::log {
namespace {

std::mutex g_secrets_mutex;
std::vector<std::string> g_secrets;

// Formats like a normal stderr sink, then masks every registered secret, so that no code path can
// log one by accident.
class RedactingStderrSink : public spdlog::sinks::base_sink<std::mutex> {
protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t formatted;
    formatter_->format(msg, formatted);
    std::string line = redact(std::string_view(formatted.data(), formatted.size()));
    fwrite(line.data(), 1, line.size(), stderr);
  }
  void flush_() override { fflush(stderr); }
};

} // namespace

void init(const std::string& level) {
  auto logger =
      std::make_shared<spdlog::logger>("sandboxer", std::make_shared<RedactingStderrSink>());
  logger->set_pattern("sandboxer: %l: %v");
  logger->set_level(spdlog::level::from_str(level));
  spdlog::set_default_logger(logger);
}

void add_secret(std::string value) {
  if (value.size() < 4) {
    return;
  }
  std::lock_guard lock(g_secrets_mutex);
  g_secrets.push_back(std::move(value));
}

std::string redact(std::string_view text) {
  std::string result(text);
  std::lock_guard lock(g_secrets_mutex);
  for (const auto& secret : g_secrets) {
    for (auto pos = result.find(secret); pos != std::string::npos;
         pos = result.find(secret, pos + 3)) {
      result.replace(pos, secret.size(), "***");
    }
  }
  return result;
}

} // namespace sandboxer::log
