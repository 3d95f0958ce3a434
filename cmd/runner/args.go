package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/urfave/cli/v3"
	"github.com/xrash/smetrics"
)

// permuteArgs lets flags come anywhere before a `--`, as go test, kubectl and gh accept them.
// urfave/cli v2 stopped reading flags at a command's first positional argument (`runner triage
// trace.json --format json` read --format as a second file); v3 reads them anywhere, but the
// rules below (help wins, global flags, dash positionals) are the runner's own, so they are
// kept here, whatever the parser's version does. It walks to
// the command (and subcommand) the arguments name and moves every flag written after a
// positional argument in front of the positionals, with its value when the flag takes one.
// After a `--` nothing moves: what follows is positional even when it starts with a dash
// (`runner triage -- -odd-name.json`). A flag the command does not define is moved too, so the
// parser reports it as unknown instead of reading it as a file name.
func permuteArgs(app *cli.Command, args []string) []string {
	if len(args) < 2 {
		return args
	}
	if j, _ := takeFlags(app.Flags, args, 1, nil); j < len(args) && args[j] == "help" {
		// `runner help [COMMAND...]` is `runner [COMMAND...] --help`.
		args = append(append(append([]string(nil), args[:j]...), args[j+1:]...), "--help")
	}
	var global, out []string
	i := 1
	// Global flags, then the command name.
	i, global = takeFlags(app.Flags, args, i, global)
	if i >= len(args) {
		return append([]string{args[0]}, global...)
	}
	cmd := findCommand(app.Commands, args[i])
	if cmd == nil {
		return append(append([]string{args[0]}, global...), args[i:]...)
	}
	if cmd.SkipFlagParsing {
		// A passthrough (runner sim sglang ...): its arguments belong to another program.
		return append(append([]string{args[0]}, global...), args[i:]...)
	}
	out = append(out, args[i])
	i++
	for {
		// Flags between a command and its subcommand belong to the command, except the
		// global ones (runner plan --log-level debug p.toml), which go in front of it.
		for i < len(args) && isFlag(args[i]) {
			i = routeFlag(app.Flags, cmd.Flags, args, i, &global, &out)
		}
		if i < len(args) && (args[i] == "help" || args[i] == "h") {
			// `runner trace help [fix]` is `runner trace [fix] --help` and `runner run help` is
			// `runner run --help`, as `runner help` is and as urfave/cli v2 read them (v3 hides
			// the help command of every command below one that hides it, as the app does).
			args = append(append(append([]string(nil), args[:i]...), args[i+1:]...), "--help")
			continue
		}
		if i >= len(args) || len(cmd.Commands) == 0 {
			break
		}
		sub := findCommand(cmd.Commands, args[i])
		if sub == nil {
			break
		}
		out = append(out, args[i])
		i++
		cmd = sub
	}
	var flags, pos []string
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i:]...)
			break
		}
		if !isFlag(a) {
			pos = append(pos, a)
			continue
		}
		i = routeFlag(app.Flags, cmd.Flags, args, i, &global, &flags) - 1
	}
	head := append([]string{args[0]}, global...)
	for _, f := range flags {
		if f == "-h" || f == "--help" || f == "-help" {
			// Help wins wherever it is written; the positionals would read as a help topic.
			return append(append(head, out...), "--help")
		}
	}
	if len(flags) > 0 && len(pos) > 0 && pos[0] != "--" && hasDashPositional(pos) {
		// A positional that starts with a dash after the moved flags would read as a flag:
		// keep it behind a `--`.
		pos = append([]string{"--"}, pos...)
	}
	return append(append(append(head, out...), flags...), pos...)
}

// routeFlag appends the flag args[i], with its value when it takes one, to global when only
// the app defines it (a global flag written after the command: runner triage x --log-level
// debug) and to local otherwise, and returns the index after it. A flag nobody defines stays
// with the command, whose parser reports it as unknown.
func routeFlag(appFlags, cmdFlags []cli.Flag, args []string, i int, global, local *[]string) int {
	a := args[i]
	defs, dst := cmdFlags, local
	if !defines(cmdFlags, a) && defines(appFlags, a) {
		defs, dst = appFlags, global
	}
	*dst = append(*dst, a)
	if takesValue(defs, a) && i+1 < len(args) {
		i++
		*dst = append(*dst, args[i])
	}
	return i + 1
}

// skipFlags returns the index of the first argument from args[i] on that is not a flag,
// skipping each flag's value as permuteArgs does (routeFlag): a global flag written after a
// command (runner trace --log-level debug fix) takes its value too, so that value is not read
// as a subcommand.
func skipFlags(appFlags, cmdFlags []cli.Flag, args []string, i int) int {
	var skipped []string
	for i < len(args) && isFlag(args[i]) {
		i = routeFlag(appFlags, cmdFlags, args, i, &skipped, &skipped)
	}
	return i
}

// takeFlags copies the flags (with their values) starting at args[i] to out and returns the
// index of the first argument that is not a flag.
func takeFlags(defs []cli.Flag, args []string, i int, out []string) (int, []string) {
	for i < len(args) && isFlag(args[i]) {
		out = append(out, args[i])
		if takesValue(defs, args[i]) && i+1 < len(args) {
			i++
			out = append(out, args[i])
		}
		i++
	}
	return i, out
}

func isFlag(a string) bool { return len(a) > 1 && a[0] == '-' && a != "--" }

func hasDashPositional(pos []string) bool {
	for _, p := range pos {
		if p == "--" {
			return false
		}
		if isFlag(p) {
			return true
		}
	}
	return false
}

// defines reports whether defs has the flag written as a.
func defines(defs []cli.Flag, a string) bool {
	name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
	for _, f := range defs {
		for _, n := range f.Names() {
			if n == name {
				return true
			}
		}
	}
	return false
}

// takesValue reports whether the flag written as a (`-x`, `--name`, never `--name=v`) is
// defined in defs and needs the next argument as its value.
func takesValue(defs []cli.Flag, a string) bool {
	if strings.Contains(a, "=") {
		return false
	}
	name := strings.TrimLeft(a, "-")
	for _, f := range defs {
		for _, n := range f.Names() {
			if n != name {
				continue
			}
			if v, ok := f.(cli.DocGenerationFlag); ok {
				return v.TakesValue()
			}
			return false
		}
	}
	// An unknown flag: assume it takes no value, so the next word stays where it was.
	return false
}

func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}

// unknownCommand is the usage error of a command or subcommand name the app does not have
// (`runner frob`, `runner trace frob`, `runner help frob`): one line, with the closest name when
// one is near and a pointer to the --help of the level it was typed at. urfave/cli would answer
// "No help topic for 'frob'" (exit 1) and suggest any name, however far.
func unknownCommand(app *cli.Command, args []string) error {
	i, _ := takeFlags(app.Flags, args, 1, nil)
	if i < len(args) && args[i] == "help" {
		// `runner help COMMAND...` names commands the same way.
		i++
	}
	cmds, path := app.Commands, []string(nil)
	for i < len(args) && len(cmds) > 0 {
		name := args[i]
		if len(path) > 0 && (name == "help" || name == "h") {
			// `runner trace help fix` is `runner trace fix --help` (permuteArgs): what follows is
			// a subcommand of trace again.
			i++
			continue
		}
		cmd := findCommand(cmds, name)
		if cmd == nil {
			where := strings.Join(append([]string{"runner"}, path...), " ")
			msg := fmt.Sprintf("unknown command %q", strings.Join(append(path, name), " "))
			if s := suggestCommand(cmds, name); s != "" {
				msg += fmt.Sprintf("; did you mean %q?", strings.Join(append(path, s), " "))
			}
			return usageErr("%s (see %s --help)", msg, where)
		}
		if cmd.SkipFlagParsing {
			return nil
		}
		path = append(path, cmd.Name)
		i = skipFlags(app.Flags, cmd.Flags, args, i+1)
		cmds = cmd.Commands
	}
	return nil
}

// suggestCommand is the visible command closest to name: a Levenshtein distance of at most 2
// (and less than the name's length, so "qq" suggests nothing), unless name begins some command
// names: then the only one it begins, or none when it begins several. It is "" when nothing is
// that close: a far guess ("xyz": "export") misleads more than no guess.
func suggestCommand(cmds []*cli.Command, name string) string {
	best, bestD := "", 3
	var prefixed []string
	for _, c := range cmds {
		if c.Hidden {
			continue
		}
		for _, n := range c.Names() {
			if d := smetrics.WagnerFischer(name, n, 1, 1, 1); d < bestD && d < len(name) {
				best, bestD = c.Name, d
			}
			if len(name) >= 2 && strings.HasPrefix(n, name) {
				prefixed = append(prefixed, c.Name)
			}
		}
	}
	switch {
	case len(prefixed) == 1:
		return prefixed[0]
	case len(prefixed) > 1:
		// "rep": report or replay; guessing one (or "run", two edits away) misleads.
		return ""
	}
	return best
}

// suggestFlag is the flag of defs closest to name (written without its dashes), as
// suggestCommand picks commands: the only flag name it begins, else one at most 2 edits away
// (fewer than its length), else "". It is written as typed on a command line: --simulate, -j.
func suggestFlag(defs []cli.Flag, name string) string {
	name, _, _ = strings.Cut(name, "=")
	var cmds []*cli.Command
	for _, f := range defs {
		if v, ok := f.(cli.VisibleFlag); ok && !v.IsVisible() {
			continue
		}
		// Each flag as a pseudo-command, so one ranking rule serves both.
		cmds = append(cmds, &cli.Command{Name: f.Names()[0], Aliases: f.Names()[1:]})
	}
	s := suggestCommand(cmds, name)
	switch {
	case s == "":
		return ""
	case len(s) == 1:
		return "-" + s
	}
	return "--" + s
}

// quietUsage makes a command's usage error one line pointing at --help, instead of urfave/cli's
// default of the whole help text with the error before and after it.
func quietUsage(cmds []*cli.Command) {
	for _, c := range cmds {
		c.OnUsageError = func(_ context.Context, cmd *cli.Command, err error, _ bool) error {
			// urfave/cli v3 quotes strconv's whole error after the value it already named
			// (`for flag -rank: strconv.ParseInt: parsing "x": invalid syntax`): keep the reason.
			// Compiled here, not at start-up: every process the runner starts is this binary.
			strconvPrefix := regexp.MustCompile(`strconv\.Parse\w+: parsing "(?:[^"\\]|\\.)*": `)
			msg := strconvPrefix.ReplaceAllString(err.Error(), "")
			if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
				if s := suggestFlag(append(append([]cli.Flag(nil), cmd.Flags...), cmd.Root().Flags...), name); s != "" {
					msg += fmt.Sprintf("; did you mean %q?", s)
				}
			}
			return usageErr("%s (see runner %s --help)", msg, commandPath(cmd))
		}
		quietUsage(c.Commands)
	}
}

// commandPath is the command's words as typed (trace fix), from the context's lineage.
func commandPath(cmd *cli.Command) string {
	var names []string
	for _, c := range cmd.Lineage() {
		// The root command is the program itself, not a word of the path.
		if c != cmd.Root() {
			names = append([]string{c.Name}, names...)
		}
	}
	return strings.Join(names, " ")
}
