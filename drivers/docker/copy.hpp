#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include <sandboxer/driver.hpp>
#include <sandboxer/tar.hpp>

#include "drivers/docker/engine_api.hpp"

// The parts of the docker driver's native `sandboxer cp` that are not calls: what the engine's stat
// means, and the stream as the engine should unpack it (docs/drivers/docker.md, "Copy").
namespace sandboxer::drivers::docker {

// The PathInfo of the engine's stat (X-Docker-Container-Path-Stat: a Go FileMode, where the type
// is in the high bits), before any link is followed.
PathInfo path_info_of_stat(const nlohmann::json& stat);

// What is at `path` in the container as stat(2) sees it: the engine's stat does not follow a final
// symbolic link, so a link is followed to its target (the engine gives it resolved in the
// container's root), a bounded number of times. A link to nothing is Kind::symlink.
PathInfo stat_following_links(EngineApi& api, const std::string& container,
                              const std::string& path);

// A copy-in stream with every entry's uid and gid replaced by 0, re-written as it is read: the
// engine gives each file the stream's uid/gid, which for a copy without --owner are the local
// user's, where a file made by exec in a container without a configured user is root's. Memory is
// bounded by the pieces the inner source hands over.
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

} // namespace sandboxer::drivers::docker
