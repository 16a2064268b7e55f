#pragma once

#include <string>
#include <string_view>

#include <sandboxer/driver.hpp>

namespace sandboxer::testing {

// An exec's output, kept for the test to read.
class CollectIo : public ExecIo {
public:
  void out(std::string_view bytes) override { stdout_text.append(bytes); }
  void err(std::string_view bytes) override { stderr_text.append(bytes); }
  std::string stdout_text, stderr_text;
};

} // namespace sandboxer::testing
