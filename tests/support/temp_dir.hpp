#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace sandboxer::testing {

// A fresh directory under $TMPDIR, removed with everything in it when the test ends.
class TempDir {
public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "sandboxer-test-XXXXXX").string();
    if (!mkdtemp(pattern.data())) {
      std::abort();
    }
    m_path = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(m_path, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return m_path; }
  std::filesystem::path operator/(const std::string& name) const { return m_path / name; }

private:
  std::filesystem::path m_path;
};

// Writes `text` to `path`, creating parent directories.
void write_file(const std::filesystem::path& path, const std::string& text);
std::string read_file(const std::filesystem::path& path);

} // namespace sandboxer::testing
