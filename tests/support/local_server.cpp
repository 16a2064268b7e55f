#include "support/local_server.hpp"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace sandboxer::testing {

LocalServer::LocalServer(const std::string& script, const std::vector<std::string>& args) {
  int out[2];
  if (pipe(out) != 0) {
    std::abort();
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  std::vector<std::string> words = {"python3", script};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& word : words) {
    argv.push_back(word.data());
  }
  argv.push_back(nullptr);
  if (posix_spawnp(&m_pid, "python3", &actions, nullptr, argv.data(), environ) != 0) {
    std::abort();
  }
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  FILE* stream = fdopen(out[0], "r");
  char line[64] = {};
  if (!fgets(line, sizeof line, stream) || std::strncmp(line, "PORT=", 5) != 0) {
    ADD_FAILURE() << script << " did not print its port";
  } else {
    m_port = std::atoi(line + 5);
  }
  fclose(stream);
}

LocalServer::~LocalServer() {
  kill(m_pid, SIGTERM);
  int status = 0;
  waitpid(m_pid, &status, 0);
}

} // namespace sandboxer::testing
