package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"
)

// The completion scripts are urfave/cli's (its autocomplete/ directory,
// MIT), for this program: each asks the binary what may come next with
// `--generate-bash-completion` (EnableBashCompletion). fish's is
// generated from the commands and flags (App.ToFishCompletion).

const bashCompletion = `# etcd-recovery bash completion: source <(etcd-recovery completion bash)
_etcd_recovery_init_completion() {
  COMPREPLY=()
  _get_comp_words_by_ref "$@" cur prev words cword
}

_etcd_recovery_complete() {
  if [[ "${COMP_WORDS[0]}" != "source" ]]; then
    local cur opts base words
    COMPREPLY=()
    cur="${COMP_WORDS[COMP_CWORD]}"
    if declare -F _init_completion >/dev/null 2>&1; then
      _init_completion -n "=:" || return
    else
      _etcd_recovery_init_completion -n "=:" || return
    fi
    words=("${words[@]:0:$cword}")
    if [[ "$cur" == "-"* ]]; then
      requestComp="${words[*]} ${cur} --generate-bash-completion"
    else
      requestComp="${words[*]} --generate-bash-completion"
    fi
    opts=$(eval "${requestComp}" 2>/dev/null)
    COMPREPLY=($(compgen -W "${opts}" -- ${cur}))
    return 0
  fi
}

complete -o bashdefault -o default -o nospace -F _etcd_recovery_complete etcd-recovery
`

const zshCompletion = `#compdef etcd-recovery
# etcd-recovery zsh completion: source <(etcd-recovery completion zsh)

_etcd_recovery_complete() {
  local -a opts
  local cur
  cur=${words[-1]}
  if [[ "$cur" == "-"* ]]; then
    opts=("${(@f)$(${words[@]:0:#words[@]-1} ${cur} --generate-bash-completion)}")
  else
    opts=("${(@f)$(${words[@]:0:#words[@]-1} --generate-bash-completion)}")
  fi

  if [[ "${opts[1]}" != "" ]]; then
    _describe 'values' opts
  else
    _files
  fi
}

compdef _etcd_recovery_complete etcd-recovery
`

var completionShells = []string{"bash", "zsh", "fish"}

func completionCommand() *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print the shell completion script: bash, zsh or fish (source <(etcd-recovery completion bash))",
		ArgsUsage: "bash|zsh|fish",
		Description: "Prints the completion script of the shell named: commands, subcommands and flags complete with TAB.\n" +
			"bash: source <(etcd-recovery completion bash) (in ~/.bashrc; uses bash-completion's helpers when installed)\n" +
			"zsh:  source <(etcd-recovery completion zsh) (after compinit)\n" +
			"fish: etcd-recovery completion fish > ~/.config/fish/completions/etcd-recovery.fish",
		Action: func(c *cli.Context) error {
			args := positional(c)
			if len(args) != 1 {
				return usagef("completion: name one shell: %s", strings.Join(completionShells, ", "))
			}
			var script string
			switch args[0] {
			case "bash":
				script = bashCompletion
			case "zsh":
				script = zshCompletion
			case "fish":
				// From a new app, not yet run: urfave/cli adds its help
				// command (a shared value) to a running app's commands,
				// and its fish generator recurses through it.
				s, err := newApp(io.Discard, io.Discard).ToFishCompletion()
				if err != nil {
					return fmt.Errorf("completion fish: %w", err)
				}
				script = s
			default:
				return usagef("completion: unknown shell %q (want %s)", args[0], strings.Join(completionShells, ", "))
			}
			_, err := fmt.Fprint(c.App.Writer, script)
			return err
		},
	}
}
