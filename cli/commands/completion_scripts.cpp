// The completion scripts: thin, each passes the words to `sandboxer __complete` and shows what it
// answers (complete.cpp decides), so a new command, option or profile needs no new script.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands/commands.hpp"
#include "core/errors.hpp"

namespace sandboxer::commands {
namespace {

// `command`, so that a function named sandboxer (a wrapper, a test's) is not what answers.
// The words are joined again where bash split them at = or : (COMP_WORDBREAKS), as
// bash-completion's _get_comp_words_by_ref -n =: does, and the part before the last break is
// taken off the candidates, since bash replaces only what follows it.
constexpr const char* k_bash = R"(# bash completion for sandboxer (sandboxer completion bash)
__sandboxer_words() {
  local line=${COMP_LINE:-} i word space
  words=() cword=0
  for ((i = 0; i < ${#COMP_WORDS[@]}; i++)); do
    word=${COMP_WORDS[i]}
    space=${line%%[! $'\t']*}
    line=${line#"$space"}
    line=${line#"$word"}
    if ((i > 0)) && [[ -n $COMP_LINE && -z $space ]] &&
      [[ $word == [=:]* || ${words[${#words[@]} - 1]} == *[=:] ]]; then
      words[${#words[@]} - 1]+=$word
    else
      words+=("$word")
    fi
    ((i == COMP_CWORD)) && cword=$((${#words[@]} - 1))
  done
}

_sandboxer() {
  local words cword
  __sandboxer_words
  local cur=${words[cword]} out prefix="" breaks="" line
  local -a lines
  out=$(command "${words[0]}" __complete "${words[@]:1:cword}" 2>/dev/null) || return 0
  mapfile -t lines <<<"$out"
  [[ $COMP_WORDBREAKS == *=* ]] && breaks+="="
  [[ $COMP_WORDBREAKS == *:* ]] && breaks+=":"
  [[ -n $breaks && $cur == *[$breaks]* ]] && prefix=${cur%"${cur##*[$breaks]}"}
  COMPREPLY=()
  case ${lines[${#lines[@]} - 1]} in
  :files | :dirs)
    compopt -o filenames 2>/dev/null
    local kind=-f
    [[ ${lines[${#lines[@]} - 1]} == :dirs ]] && kind=-d
    mapfile -t COMPREPLY < <(compgen "$kind" -- "${cur#"$prefix"}")
    return 0
    ;;
  :nospace) compopt -o nospace 2>/dev/null ;;
  esac
  for line in "${lines[@]:0:${#lines[@]}-1}"; do
    line=${line%%$'\t'*}
    COMPREPLY+=("${line#"$prefix"}")
  done
}
complete -F _sandboxer sandboxer
)";

// Loaded either way: sourced (`source <(sandboxer completion zsh)`) it registers itself; found on
// $fpath and autoloaded, the file is _sandboxer's body and completes at the first TAB.
constexpr const char* k_zsh = R"(#compdef sandboxer
# zsh completion for sandboxer (sandboxer completion zsh)
_sandboxer() {
  local -a lines candidates
  local line value description directive
  lines=("${(@f)$(command ${words[1]} __complete "${(@)words[2,CURRENT]}" 2>/dev/null)}")
  directive=${lines[-1]}
  for line in "${(@)lines[1,-2]}"; do
    value=${line%%$'\t'*}
    description=""
    [[ $line == *$'\t'* ]] && description=${line#*$'\t'}
    candidates+=("${value//:/\\:}${description:+:$description}")
  done
  case $directive in
  :files) _files ;;
  :dirs) _files -/ ;;
  :nospace) (( ${#candidates} )) && _describe -t values value candidates -S '' ;;
  *) (( ${#candidates} )) && _describe -t values value candidates ;;
  esac
}
if [ "$funcstack[1]" = _sandboxer ]; then
  _sandboxer "$@"
else
  compdef _sandboxer sandboxer
fi
)";

// fish takes "VALUE<TAB>DESCRIPTION" lines as they are.
constexpr const char* k_fish = R"(# fish completion for sandboxer (sandboxer completion fish)
function __sandboxer_complete
    set -l tokens (commandline -opc)
    set -l current (commandline -ct)
    set -l lines (command $tokens[1] __complete $tokens[2..-1] "$current" 2>/dev/null)
    switch "$lines[-1]"
        case :files
            __fish_complete_path "$current"
        case :dirs
            __fish_complete_directories "$current"
    end
    string match -v -r '^:' -- $lines
end
complete -c sandboxer -f -a '(__sandboxer_complete)'
)";

} // namespace

std::string completion_script(const std::string& shell) {
  if (shell == "bash") {
    return k_bash;
  }
  if (shell == "zsh") {
    return k_zsh;
  }
  if (shell == "fish") {
    return k_fish;
  }
  throw UsageError(fmt::format("completion: unknown shell \"{}\" (bash, zsh or fish)", shell));
}

} // namespace sandboxer::commands
