package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/urfave/cli/v3"
)

// completionCommand prints a shell completion script generated from the command tree: the
// commands, their subcommands and flags, and file names for arguments. The scripts are static
// (they do not call the runner back while completing), so completing never runs a plan.
func completionCommand(std stdio) *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print a shell completion script for bash, zsh or fish",
		ArgsUsage: "bash|zsh|fish",
		Description: `Prints a completion script of the runner's commands, subcommands and flags (file names for
arguments). Load it from the shell's start-up file:

  bash:  source <(runner completion bash)          (in ~/.bashrc)
  zsh:   source <(runner completion zsh)           (in ~/.zshrc)
  fish:  runner completion fish > ~/.config/fish/completions/runner.fish`,
		Action: func(ctx context.Context, c *cli.Command) error {
			args, err := positional(c, 1, 1, "bash|zsh|fish")
			if err != nil {
				return err
			}
			switch args[0] {
			case "bash":
				writeBashCompletion(std.out, c.Root(), false)
			case "zsh":
				writeBashCompletion(std.out, c.Root(), true)
			case "fish":
				writeFishCompletion(std.out, c.Root())
			default:
				return usageErr("unknown shell %q: bash, zsh or fish", args[0])
			}
			return nil
		},
	}
}

// visible are the commands a user types (sim and exec-cell are the runner's own).
func visible(cmds []*cli.Command) []*cli.Command {
	var out []*cli.Command
	for _, c := range cmds {
		if !c.Hidden && c.Name != "help" {
			out = append(out, c)
		}
	}
	return out
}

// flagWords are the flags of defs as typed: --name for long names, -x for one letter.
func flagWords(defs []cli.Flag) []string {
	var out []string
	for _, f := range defs {
		if v, ok := f.(cli.VisibleFlag); ok && !v.IsVisible() {
			continue
		}
		for _, n := range f.Names() {
			if len(n) == 1 {
				out = append(out, "-"+n)
			} else {
				out = append(out, "--"+n)
			}
		}
	}
	sort.Strings(out)
	return out
}

// ownFlags are the flags c defines, without the --help that urfave/cli v3 adds to every command
// of the tree before the completion command runs: the global words offer --help once already.
func ownFlags(c *cli.Command) []cli.Flag {
	var out []cli.Flag
	for _, f := range c.Flags {
		if f.Names()[0] != "help" {
			out = append(out, f)
		}
	}
	return out
}

func names(cmds []*cli.Command) []string {
	var out []string
	for _, c := range cmds {
		out = append(out, c.Name)
	}
	return out
}

// writeBashCompletion writes a bash completion function; zsh loads the same through
// bashcompinit. The command path is the first non-flag words that name a command and a
// subcommand; after it, a word that starts with a dash completes a flag of that command (or a
// global one), any other word a file name.
func writeBashCompletion(w io.Writer, app *cli.Command, zsh bool) {
	if zsh {
		fmt.Fprintln(w, "#compdef runner\nautoload -U +X bashcompinit && bashcompinit")
	}
	global := strings.Join(flagWords(app.Flags), " ")
	fmt.Fprintf(w, `_runner() {
  local cur=${COMP_WORDS[COMP_CWORD]} cmdpath="" w i
  for ((i = 1; i < COMP_CWORD; i++)); do
    w=${COMP_WORDS[i]}
    [[ $w == -* ]] && continue
    case "$cmdpath $w" in
`)
	var cases []string
	for _, c := range visible(app.Commands) {
		cases = append(cases, fmt.Sprintf("      %q) cmdpath=%q ;;\n", " "+c.Name, c.Name))
		for _, s := range visible(c.Commands) {
			cases = append(cases, fmt.Sprintf("      %q) cmdpath=%q ;;\n", c.Name+" "+s.Name, c.Name+" "+s.Name))
		}
	}
	fmt.Fprint(w, strings.Join(cases, ""))
	fmt.Fprintf(w, `      *) break ;;
    esac
  done
  local words
  case $cmdpath in
    "") words=%q ;;
`, strings.Join(append(names(visible(app.Commands)), flagWords(app.Flags)...), " "))
	for _, c := range visible(app.Commands) {
		fmt.Fprintf(w, "    %q) words=%q ;;\n", c.Name, strings.Join(append(names(visible(c.Commands)), flagWords(ownFlags(c))...), " ")+" "+global)
		for _, s := range visible(c.Commands) {
			fmt.Fprintf(w, "    %q) words=%q ;;\n", c.Name+" "+s.Name, strings.Join(flagWords(ownFlags(s)), " ")+" "+global)
		}
	}
	fmt.Fprint(w, `  esac
  if [[ $cur == -* || -z $cmdpath ]]; then
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
  else
    COMPREPLY=($(compgen -W "$words" -- "$cur") $(compgen -f -- "$cur"))
  fi
}
complete -o filenames -F _runner runner
`)
}

// writeFishCompletion writes fish completions: commands until one is given, then its
// subcommands and flags.
func writeFishCompletion(w io.Writer, app *cli.Command) {
	top := visible(app.Commands)
	for _, f := range app.Flags {
		fishFlag(w, "", f)
	}
	for _, c := range top {
		fmt.Fprintf(w, "complete -c runner -f -n '__fish_use_subcommand' -a %s -d %s\n", c.Name, fishQuote(c.Usage))
		cond := "__fish_seen_subcommand_from " + c.Name
		if subs := visible(c.Commands); len(subs) > 0 {
			for _, s := range subs {
				fmt.Fprintf(w, "complete -c runner -f -n '%s' -a %s -d %s\n", cond, s.Name, fishQuote(s.Usage))
			}
		} else {
			fmt.Fprintf(w, "complete -c runner -F -n '%s'\n", cond)
		}
		for _, f := range ownFlags(c) {
			fishFlag(w, cond, f)
		}
		for _, s := range visible(c.Commands) {
			for _, f := range ownFlags(s) {
				fishFlag(w, cond+"; and __fish_seen_subcommand_from "+s.Name, f)
			}
		}
	}
}

func fishFlag(w io.Writer, cond string, f cli.Flag) {
	if v, ok := f.(cli.VisibleFlag); ok && !v.IsVisible() {
		return
	}
	var b strings.Builder
	b.WriteString("complete -c runner")
	if cond != "" {
		fmt.Fprintf(&b, " -n '%s'", cond)
	}
	for _, n := range f.Names() {
		if len(n) == 1 {
			fmt.Fprintf(&b, " -s %s", n)
		} else {
			fmt.Fprintf(&b, " -l %s", n)
		}
	}
	if v, ok := f.(cli.DocGenerationFlag); ok {
		if v.TakesValue() {
			b.WriteString(" -r")
		}
		if u := v.GetUsage(); u != "" {
			fmt.Fprintf(&b, " -d %s", fishQuote(u))
		}
	}
	fmt.Fprintln(w, b.String())
}

// fishQuote quotes s for fish: single quotes, with \ and ' escaped.
func fishQuote(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}
