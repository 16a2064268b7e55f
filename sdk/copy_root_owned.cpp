#include <algorithm>
#include <cstring>

#include <sandboxer/copy_root_owned.hpp>

namespace sandboxer {

RootOwnedSource::RootOwnedSource(CopySource& inner)
    : m_inner(inner), m_writer([this](std::string_view bytes) { m_out.append(bytes); }),
      m_rewrite(m_writer), m_reader(m_rewrite) {}

void RootOwnedSource::Rewrite::begin(const tar::Entry& entry) {
  tar::Entry owned = entry;
  owned.uid = 0;
  owned.gid = 0;
  m_writer.begin(owned);
}

size_t RootOwnedSource::read(char* buffer, size_t size) {
  char piece[65536];
  while (m_out_at == m_out.size() && !m_done) {
    m_out.clear();
    m_out_at = 0;
    const size_t n = m_inner.read(piece, sizeof piece);
    if (n == 0) {
      m_reader.finish();
      m_writer.finish();
      m_done = true;
    } else {
      m_reader.feed(std::string_view(piece, n));
    }
  }
  const size_t n = std::min(size, m_out.size() - m_out_at);
  std::memcpy(buffer, m_out.data() + m_out_at, n);
  m_out_at += n;
  return n;
}

} // namespace sandboxer
