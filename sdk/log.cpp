#include <chrono>
#include <ctime>
#include <fmt/format.h>
#include <mutex>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/base_sink.h>
#include <unistd.h>
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

bool stderr_is_terminal() {
  static const bool terminal = ::isatty(STDERR_FILENO) == 1;
  return terminal;
}

} // namespace

std::string prefix() {
  if (stderr_is_terminal()) {
    return "sandboxer: ";
  }
  const auto now = std::chrono::system_clock::now();
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[40];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &utc);
  return fmt::format("{}.{:03}Z sandboxer: ", text, ms);
}

void init(const std::string& level) {
  auto logger =
      std::make_shared<spdlog::logger>("sandboxer", std::make_shared<RedactingStderrSink>());
  logger->set_formatter(std::make_unique<spdlog::pattern_formatter>(
      stderr_is_terminal() ? "sandboxer: %l: %v" : "%Y-%m-%dT%H:%M:%S.%eZ sandboxer: %l: %v",
      spdlog::pattern_time_type::utc));
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
