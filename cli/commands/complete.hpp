#pragma once

#include <map>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace sandboxer::commands {

// One answer to a TAB: what to insert, and what the shell shows beside it.
struct Candidate {
  std::string value;
  std::string description;
  bool operator==(const Candidate&) const = default;
};

// What the shell does besides offering the candidates: nothing (no file names), no space after
// the one inserted, or its own file or directory completion.
enum class Directive { none, nospace, files, dirs };

struct Completions {
  std::vector<Candidate> candidates;
  Directive directive = Directive::none;
};

// The options given on the line being completed, by long name ("state-dir": "/tmp/s"): which
// ledger and profiles a candidate comes from.
using GivenOptions = std::map<std::string, std::string>;

// Where the values that change come from: the ledger, the profile search path, the drivers.
// Answers what it can cheaply, never waits for a lock or a network, and may answer nothing.
class CompletionSource {
public:
  virtual ~CompletionSource() = default;
  // Ids and names of the resident records (only live ones when `live_only`).
  virtual std::vector<Candidate> sandboxes(const GivenOptions& given, bool live_only) = 0;
  // SANDBOX:NAME and snp-... of every snapshot in the ledger.
  virtual std::vector<Candidate> snapshots(const GivenOptions& given) = 0;
  // Profile names (file stems) on the search path, the first of a name only.
  virtual std::vector<Candidate> profiles(const GivenOptions& given) = 0;
  virtual std::vector<Candidate> drivers() = 0;
  virtual std::vector<Candidate> schemas() = 0;
};

// The candidates for the last of `words` (the words after the program's name; the last may be
// empty) on the command tree `root`, with their directive. Only candidates that start with what
// the last word already holds.
Completions complete(const CLI::App& root, const std::vector<std::string>& words,
                     CompletionSource& source);

// `sandboxer __complete WORDS...`'s output: "VALUE\tDESCRIPTION" lines, then ":none", ":nospace",
// ":files" or ":dirs".
std::string format_completions(const Completions& completions);

// The whole of `sandboxer __complete WORDS...` with the real source (complete_source.cpp):
// prints the candidates, never logs, creates, locks nor connects. Returns the exit code.
int run_complete(const CLI::App& root, const std::vector<std::string>& words);

} // namespace sandboxer::commands
