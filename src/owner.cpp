#include <climits>
#include <cstdlib>
#include <fmt/format.h>
#include <pwd.h>
#include <unistd.h>
#include <vector>

#include <sandboxer/owner.hpp>

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

std::string env_or_empty(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

std::string user_name() {
  if (auto user = env_or_empty("USER"); !user.empty()) {
    return user;
  }
  // No $USER under cron or in minimal containers: fall back to the passwd entry, then the uid.
  const uid_t uid = geteuid();
  long size = sysconf(_SC_GETPW_R_SIZE_MAX);
  std::vector<char> buffer(size > 0 ? static_cast<size_t>(size) : 16384);
  passwd entry{};
  passwd* found = nullptr;
  if (getpwuid_r(uid, &entry, buffer.data(), buffer.size(), &found) == 0 && found &&
      found->pw_name && *found->pw_name) {
    return found->pw_name;
  }
  return fmt::format("uid {}", uid);
}

} // namespace

std::string host_name() {
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
