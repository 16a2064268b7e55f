#pragma once

#include <string>

#include <sandboxer/driver.hpp>
#include <sandboxer/tar.hpp>

namespace sandboxer {

// A copy-in stream with every entry's uid and gid replaced by 0, re-written as it is read. A
// backend that unpacks with the stream's own ids (docker's archive endpoint, `docker cp`) would
// give a copy without --owner the local user's ids, where a file made by exec in a container
// without a configured user is root's. Memory is bounded by the pieces the inner source hands over.
class RootOwnedSource : public CopySource {
public:
  explicit RootOwnedSource(CopySource& inner);
  size_t read(char* buffer, size_t size) override;

private:
  class Rewrite : public tar::Sink {
  public:
    explicit Rewrite(tar::Writer& writer) : m_writer(writer) {}
    void begin(const tar::Entry& entry) override;
    void data(std::string_view chunk) override { m_writer.data(chunk); }
    void end() override { m_writer.end(); }

  private:
    tar::Writer& m_writer;
  };

  CopySource& m_inner;
  std::string m_out; // made and not yet read
  size_t m_out_at = 0;
  tar::Writer m_writer;
  Rewrite m_rewrite;
  tar::Reader m_reader;
  bool m_done = false;
};

} // namespace sandboxer
