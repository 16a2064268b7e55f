#include "core/owner.hpp"

#include <climits>
#include <cstdlib>
#include <fmt/format.h>
#include <pwd.h>
#include <unistd.h>
#include <vector>

#include <sandboxer/endpoint.hpp>

namespace sandboxer {
namespace {

// The CI variables recorded in Owner::ci: enough to find the job that made a sandbox on GitLab,
// GitHub Actions, Jenkins, Buildkite and CircleCI. None of them is a secret.
constexpr const char* k_ci_variables[] = {
    "CI",
    "CI_JOB_ID",
    "CI_PIPELINE_ID",
    "CI_PROJECT_PATH",
    "GITHUB_RUN_ID",
    "GITHUB_RUN_ATTEMPT",
    "GITHUB_REPOSITORY",
    "GITHUB_WORKFLOW",
    "GITHUB_JOB",
    "BUILD_ID",
    "BUILD_URL",
    "JOB_NAME",
    "BUILDKITE_BUILD_ID",
    "CIRCLE_WORKFLOW_ID",
};

// The variables that identify one job, most specific first; describe() shows the first one set.
constexpr const char* k_ci_job_ids[] = {
    "CI_JOB_ID",          "GITHUB_RUN_ID",      "BUILD_ID",
    "BUILDKITE_BUILD_ID", "CIRCLE_WORKFLOW_ID", "CI_PIPELINE_ID",
};

// The passwd entry of the effective user, or none.
template <typename F> auto with_passwd_entry(F&& read) -> decltype(read(std::declval<passwd&>())) {
  long size = sysconf(_SC_GETPW_R_SIZE_MAX);
  std::vector<char> buffer(size > 0 ? static_cast<size_t>(size) : 16384);
  passwd entry{};
  passwd* found = nullptr;
  if (getpwuid_r(geteuid(), &entry, buffer.data(), buffer.size(), &found) == 0 && found) {
    return read(entry);
  }
  return {};
}

std::string user_name() {
  if (auto user = env_or_empty("USER"); !user.empty()) {
    return user;
  }
  // No $USER under cron or in minimal containers: fall back to the passwd entry, then the uid.
  std::string name = with_passwd_entry(
      [](const passwd& entry) { return std::string(entry.pw_name ? entry.pw_name : ""); });
  return name.empty() ? fmt::format("uid {}", geteuid()) : name;
}

} // namespace

std::optional<std::filesystem::path> home_directory() {
  if (auto home = env_or_empty("HOME"); !home.empty()) {
    return home;
  }
  std::string from_passwd = with_passwd_entry(
      [](const passwd& entry) { return std::string(entry.pw_dir ? entry.pw_dir : ""); });
  if (from_passwd.empty() || from_passwd == "/") {
    return std::nullopt;
  }
  return from_passwd;
}

std::optional<std::filesystem::path> config_home() {
  if (auto xdg = env_or_empty("XDG_CONFIG_HOME"); !xdg.empty()) {
    return xdg;
  }
  if (auto home = home_directory()) {
    return *home / ".config";
  }
  return std::nullopt;
}

std::vector<std::filesystem::path> directories_in(const char* variable) {
  std::vector<std::filesystem::path> dirs;
  const char* list = std::getenv(variable);
  std::string_view rest = list ? list : "";
  while (!rest.empty()) {
    size_t colon = rest.find(':');
    if (std::string_view dir = rest.substr(0, colon); !dir.empty()) {
      dirs.emplace_back(dir);
    }
    rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
  }
  return dirs;
}

std::string host_name() {
  // Machines that share a ledger must tell themselves apart: containers and cloned runners often
  // share one hostname, so the operator may name the machine.
  if (const char* named = std::getenv("SANDBOXER_HOST"); named && *named) {
    return named;
  }
  char buffer[HOST_NAME_MAX + 1] = {};
  if (gethostname(buffer, sizeof(buffer) - 1) != 0 || buffer[0] == '\0') {
    return "unknown-host";
  }
  return buffer;
}

Owner current_owner() {
  Owner owner;
  owner.user = user_name();
  owner.host = host_name();
  owner.pid = static_cast<int>(getpid());
  for (const char* name : k_ci_variables) {
    if (auto value = env_or_empty(name); !value.empty()) {
      owner.ci.emplace(name, std::move(value));
    }
  }
  return owner;
}

std::string describe(const Owner& owner) {
  std::string text = fmt::format("{}@{} pid {}", owner.user, owner.host, owner.pid);
  for (const char* name : k_ci_job_ids) {
    if (auto it = owner.ci.find(name); it != owner.ci.end()) {
      text += fmt::format(" ci {}={}", it->first, it->second);
      break;
    }
  }
  return text;
}

} // namespace sandboxer
