#include "drivers/e2b/logs.hpp"

#include <algorithm>
#include <fmt/format.h>

#include <sandboxer/interrupt.hpp>

namespace sandboxer::drivers::e2b {
namespace {

using json = nlohmann::json;

constexpr int k_page = 1000; // the API's maximum limit

// "2026-12-06T20:00:01.123Z" -> milliseconds since the epoch (the cursor's unit).
std::optional<long long> millis_of(const std::string& text) {
  auto seconds = parse_time(text);
  if (!seconds) {
    return std::nullopt;
  }
  long long ms = seconds->time_since_epoch().count() * 1000;
  if (auto dot = text.find('.'); dot != std::string::npos) {
    std::string digits;
    for (size_t i = dot + 1; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]));
         ++i) {
      digits += text[i];
    }
    digits = (digits + "000").substr(0, 3);
    ms += std::stoll(digits);
  }
  return ms;
}

struct Entry {
  long long ms = 0;
  LogLine line;
};

std::vector<Entry> entries_of(const Api& api, const std::string& path) {
  auto response = api.send("GET", path, std::nullopt, Retry::idempotent);
  if (response.status != 200) {
    api.fail(response, "read the logs of the sandbox");
  }
  json body = json::parse(response.body, nullptr, false);
  if (!body.is_object() || !body.contains("logs") || !body["logs"].is_array()) {
    throw DriverError(DriverError::Kind::error,
                      "E2B read the logs of the sandbox: the answer has no logs array");
  }
  std::vector<Entry> out;
  for (const auto& item : body["logs"]) {
    if (!item.is_object()) {
      continue;
    }
    Entry entry;
    std::string stamp = item.value("timestamp", "");
    entry.ms = millis_of(stamp).value_or(0);
    entry.line.time = parse_time(stamp);
    // The API tells levels, not streams: warnings and errors are the sandbox's stderr.
    std::string level = item.value("level", "info");
    entry.line.stream = level == "error" || level == "warn" ? "stderr" : "stdout";
    entry.line.text = item.value("message", "");
    // A message may hold several lines: each is one.
    std::string rest = entry.line.text;
    while (!rest.empty() && rest.back() == '\n') {
      rest.pop_back();
    }
    size_t start = 0;
    for (size_t nl; (nl = rest.find('\n', start)) != std::string::npos; start = nl + 1) {
      Entry part = entry;
      part.line.text = rest.substr(start, nl - start);
      out.push_back(part);
    }
    entry.line.text = rest.substr(start);
    out.push_back(entry);
  }
  return out;
}

bool still_running(const Api& api, const std::string& sandbox_id) {
  auto response =
      api.send("GET", "/sandboxes/" + url_escape(sandbox_id), std::nullopt, Retry::idempotent);
  if (response.status == 404) {
    return false;
  }
  if (response.status != 200) {
    api.fail(response, fmt::format("get sandbox {}", sandbox_id));
  }
  json body = json::parse(response.body, nullptr, false);
  return body.is_object() && body.value("state", "running") == "running";
}

} // namespace

void read_logs(const Api& api, const std::string& sandbox_id, const LogsRequest& request,
               LogSink& sink) {
  const std::string base = "/v2/sandboxes/" + url_escape(sandbox_id) + "/logs";
  long long cursor = request.since ? request.since->time_since_epoch().count() * 1000 : 0;
  // Entries at the cursor's millisecond already printed: the next page starts at that
  // millisecond again (the cursor is inclusive), and they are not printed twice.
  size_t printed_at_cursor = 0;
  auto emit = [&](const Entry& entry) {
    if (entry.ms == cursor) {
      ++printed_at_cursor;
    } else {
      cursor = entry.ms;
      printed_at_cursor = 1;
    }
    sink.line(entry.line);
  };
  if (request.tail) {
    // The last N: newest first from the API, printed oldest first.
    auto newest = entries_of(api, fmt::format("{}?direction=backward&limit={}", base,
                                              std::clamp<std::size_t>(*request.tail, 1, k_page)));
    std::reverse(newest.begin(), newest.end());
    std::erase_if(newest, [&](const Entry& e) { return e.ms < cursor; });
    if (newest.size() > *request.tail) {
      newest.erase(newest.begin(), newest.end() - static_cast<std::ptrdiff_t>(*request.tail));
    }
    for (const auto& entry : newest) {
      emit(entry);
    }
    if (newest.empty() && request.follow) {
      // Nothing printed: follow from now on, not from the beginning.
      cursor = std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count();
    }
  }
  bool first_pass = !request.tail.has_value();
  for (;;) {
    if (first_pass || request.follow) {
      for (;;) {
        auto page = entries_of(
            api, fmt::format("{}?direction=forward&limit={}&cursor={}", base, k_page, cursor));
        size_t skip = printed_at_cursor;
        size_t emitted = 0;
        for (const auto& entry : page) {
          if (entry.ms < cursor) {
            continue;
          }
          if (entry.ms == cursor && skip > 0) {
            --skip;
            continue;
          }
          emit(entry);
          ++emitted;
        }
        if (page.size() < static_cast<size_t>(k_page) || emitted == 0) {
          break;
        }
      }
    }
    first_pass = false;
    if (!request.follow || !still_running(api, sandbox_id)) {
      return;
    }
    interrupt::sleep_for(std::chrono::seconds(1));
  }
}

} // namespace sandboxer::drivers::e2b
