#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include <sandboxer/driver.hpp>

#include "core/cp/stream.hpp"

// One `sandboxer cp`, from the paths the user gave to the bytes moved and their digests: where
// the copy goes by docker cp's rules (docs/cp.md, "Where a copy goes"), then the stream, made or
// read as it passes, through the driver's own copy or tar over its exec.
namespace sandboxer::cp {

// How a copy reaches the sandbox.
class Channel {
public:
  enum class Via { native, exec };
  Channel(Driver& driver, SandboxHandle sandbox, Via via);
  Via via() const { return m_via; }
  const char* via_name() const { return m_via == Via::native ? "native" : "exec"; }
  const SandboxHandle& sandbox() const { return m_sandbox; }
  PathInfo stat(const std::string& path);
  void copy_in(const CopyInRequest& request, CopySource& source);
  void copy_out(const CopyOutRequest& request, CopySink& sink);

private:
  Driver& m_driver;
  SandboxHandle m_sandbox;
  Via m_via;
};

struct CopyOptions {
  bool follow = false;                                 // --follow
  std::optional<std::pair<int64_t, int64_t>> owner;    // --owner UID:GID
  bool verify = false;                                 // --verify
  std::function<void(uint64_t stream_bytes)> progress; // as the stream passes
};

// What a copy moved: the body of its history entry and of `cp -o json` (schemas/output).
struct CopyResult {
  std::string direction; // "in" or "out"
  std::string via;       // "native" or "exec"
  std::vector<std::string> sources;
  std::string destination;
  uint64_t files = 0;
  uint64_t entries = 0;
  uint64_t bytes = 0;
  uint64_t stream_bytes = 0;
  std::string sha256; // of the tar stream
  std::vector<FileDigest> file_digests;
  bool digests_truncated = false;
  uint64_t skipped = 0; // sockets, fifos, devices: never copied
  std::optional<bool> verified;
  double seconds = 0;
};
nlohmann::json to_json(const CopyResult& result);

// Where a copy into the sandbox goes, decided before any byte moves.
struct InPlan {
  std::string directory; // in the sandbox, existing
  struct Item {
    std::filesystem::path local; // "-": a tar stream on stdin
    std::string name;            // in the stream ("." for a directory's contents)
  };
  std::vector<Item> items;
};
// `sources` as the user gave them; `destination` the sandbox path after "ID:".
InPlan plan_copy_in(Channel& channel, const std::vector<std::string>& sources,
                    const std::string& destination, bool follow);

struct OutPlan {
  std::string sandbox_path;              // asked of the driver
  bool to_stdout = false;                // DEST "-": the stream as it is
  std::filesystem::path local_directory; // where the entries land
  std::string top;                       // the copied path's name there ("" for its contents alone)
};
OutPlan plan_copy_out(Channel& channel, const std::string& source, const std::string& destination);

// The copies themselves; `result` is filled as far as the copy went, also when it throws (the
// history then says how far it got).
void copy_in(Channel& channel, const InPlan& plan, const CopyOptions& options, CopyResult& result);
void copy_out(Channel& channel, const OutPlan& plan, const CopyOptions& options,
              CopyResult& result);

// "/a/b/" -> "/a/b"; a relative path is taken from the sandbox's root, as docker cp does.
std::string sandbox_absolute(const std::string& path);

} // namespace sandboxer::cp
