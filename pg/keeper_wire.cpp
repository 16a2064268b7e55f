#include "pg/keeper_wire.hpp"

#include <algorithm>
#include <climits>
#include <fmt/format.h>

namespace sandboxer::ledger::pg::wire {
namespace {

class Writer {
public:
  void u8(std::uint8_t value) { m_out.push_back(static_cast<char>(value)); }
  void u32(std::uint32_t value) {
    for (int shift = 24; shift >= 0; shift -= 8) {
      u8(static_cast<std::uint8_t>(value >> shift));
    }
  }
  void i64(std::int64_t value) {
    const auto bits = static_cast<std::uint64_t>(value);
    u32(static_cast<std::uint32_t>(bits >> 32));
    u32(static_cast<std::uint32_t>(bits));
  }
  void text(std::string_view value) {
    u32(static_cast<std::uint32_t>(value.size()));
    m_out.append(value);
  }
  void maybe(const std::optional<std::string>& value) {
    u8(value ? 1 : 0);
    if (value) {
      text(*value);
    }
  }
  std::string take() { return std::move(m_out); }

private:
  std::string m_out;
};

class Reader {
public:
  explicit Reader(std::string_view in) : m_in(in) {}
  std::uint8_t u8() {
    need(1);
    return static_cast<std::uint8_t>(m_in[m_at++]);
  }
  std::uint32_t u32() {
    std::uint32_t value = 0;
    for (int i = 0; i < 4; ++i) {
      value = (value << 8) | u8();
    }
    return value;
  }
  std::int64_t i64() {
    const std::uint64_t high = u32();
    return static_cast<std::int64_t>((high << 32) | u32());
  }
  std::string text() {
    const std::uint32_t size = u32();
    need(size);
    std::string value(m_in.substr(m_at, size));
    m_at += size;
    return value;
  }
  std::optional<std::string> maybe() {
    const std::uint8_t present = u8();
    if (present > 1) {
      throw WireError(fmt::format("a null flag of {} at byte {}", present, m_at - 1));
    }
    return present ? std::optional<std::string>(text()) : std::nullopt;
  }
  // A count of items that take at least `least` bytes each: bounded by what is left, so that a
  // damaged count cannot make the reader reserve gigabytes.
  std::uint32_t count(std::size_t least) {
    const std::uint32_t n = u32();
    if (least > 0 && n > (m_in.size() - m_at) / least) {
      throw WireError(fmt::format("a count of {} with {} bytes left", n, m_in.size() - m_at));
    }
    return n;
  }
  void finish() const {
    if (m_at != m_in.size()) {
      throw WireError(fmt::format("{} bytes after the end", m_in.size() - m_at));
    }
  }

private:
  void need(std::size_t size) const {
    if (size > m_in.size() - m_at) {
      throw WireError(
          fmt::format("cut short: {} bytes wanted at byte {} of {}", size, m_at, m_in.size()));
    }
  }
  std::string_view m_in;
  std::size_t m_at = 0;
};

} // namespace

std::string encode(const Request& request) {
  Writer out;
  out.u8(static_cast<std::uint8_t>(request.call));
  out.u32(static_cast<std::uint32_t>(std::clamp<long long>(request.timeout.count(), 0, INT32_MAX)));
  out.u32(static_cast<std::uint32_t>(request.statements.size()));
  for (const auto& statement : request.statements) {
    out.text(statement.sql);
    out.u32(static_cast<std::uint32_t>(statement.params.size()));
    for (const auto& param : statement.params) {
      out.maybe(param);
    }
  }
  return out.take();
}

Request decode_request(std::string_view body) {
  Reader in(body);
  Request request;
  const std::uint8_t call = in.u8();
  if (call < 1 || call > 4) {
    throw WireError(fmt::format("no call {}", call));
  }
  request.call = static_cast<Call>(call);
  request.timeout = std::chrono::milliseconds(in.u32());
  for (std::uint32_t s = 0, n = in.count(8); s < n; ++s) {
    auto& statement = request.statements.emplace_back();
    statement.sql = in.text();
    for (std::uint32_t p = 0, params = in.count(1); p < params; ++p) {
      statement.params.push_back(in.maybe());
    }
  }
  in.finish();
  const std::size_t statements = request.statements.size();
  const bool one = request.call == Call::query || request.call == Call::script;
  if ((one && statements != 1) || (request.call == Call::server_version && statements != 0)) {
    throw WireError(fmt::format("call {} with {} statements", call, statements));
  }
  return request;
}

std::string encode(const Reply& reply) {
  Writer out;
  out.u8(reply.failed ? 1 : 0);
  if (reply.failed) {
    out.u8(static_cast<std::uint8_t>(reply.failure));
    out.text(reply.sqlstate);
    out.text(reply.message);
    return out.take();
  }
  out.u32(static_cast<std::uint32_t>(reply.results.size()));
  for (const auto& rows : reply.results) {
    out.u32(static_cast<std::uint32_t>(rows.columns.size()));
    for (const auto& column : rows.columns) {
      out.text(column);
    }
    // Rows without columns (SELECT FROM t) would take no bytes, so a reader could not bound
    // their count: none are sent; the ledger asks for no such thing.
    const bool sent = !rows.columns.empty();
    out.u32(sent ? static_cast<std::uint32_t>(rows.values.size()) : 0);
    for (std::size_t r = 0; sent && r < rows.values.size(); ++r) {
      for (const auto& value : rows.values[r]) { // as many as there are columns
        out.maybe(value);
      }
    }
    out.i64(rows.affected);
  }
  return out.take();
}

Reply decode_reply(std::string_view body) {
  Reader in(body);
  Reply reply;
  const std::uint8_t failed = in.u8();
  if (failed > 1) {
    throw WireError(fmt::format("a reply of kind {}", failed));
  }
  if (failed) {
    reply.failed = true;
    const std::uint8_t failure = in.u8();
    if (failure > static_cast<std::uint8_t>(Failure::statement)) {
      throw WireError(fmt::format("no failure {}", failure));
    }
    reply.failure = static_cast<Failure>(failure);
    reply.sqlstate = in.text();
    reply.message = in.text();
    in.finish();
    return reply;
  }
  for (std::uint32_t r = 0, n = in.count(16); r < n; ++r) {
    auto& rows = reply.results.emplace_back();
    for (std::uint32_t c = 0, columns = in.count(4); c < columns; ++c) {
      rows.columns.push_back(in.text());
    }
    const std::size_t width = rows.columns.size();
    const std::uint32_t count = in.count(std::max<std::size_t>(width, 1));
    if (width == 0 && count > 0) {
      throw WireError(fmt::format("{} rows without columns", count));
    }
    for (std::uint32_t v = 0; v < count; ++v) {
      auto& row = rows.values.emplace_back();
      row.reserve(width);
      for (std::size_t c = 0; c < width; ++c) {
        row.push_back(in.maybe());
      }
    }
    rows.affected = in.i64();
  }
  in.finish();
  return reply;
}

std::string frame(std::string body) {
  if (body.size() > k_max_frame) {
    throw WireError(fmt::format("a frame of {} bytes (at most {})", body.size(), k_max_frame));
  }
  Writer prefix;
  prefix.u32(static_cast<std::uint32_t>(body.size()));
  return prefix.take() + body;
}

std::uint32_t frame_length(const char prefix[4]) {
  Reader in(std::string_view(prefix, 4));
  const std::uint32_t length = in.u32();
  if (length > k_max_frame) {
    throw WireError(fmt::format("a frame of {} bytes (at most {})", length, k_max_frame));
  }
  return length;
}

} // namespace sandboxer::ledger::pg::wire
