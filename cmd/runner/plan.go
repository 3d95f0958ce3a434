package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/sglprof/runner/runner"
)

func planCommand(std stdio) *cli.Command {
	return &cli.Command{
		Name:      "plan",
		Usage:     "validate a plan and print its cells with the exact argv and environment each would run",
		ArgsUsage: "PLAN.toml",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print JSON for machines"},
			&cli.BoolFlag{Name: "simulate", Usage: "show the argv that run --simulate would use"},
		},
		Action: interruptible(func(c *cli.Context) error {
			args, err := positional(c, 1, 1, "PLAN.toml")
			if err != nil {
				return err
			}
			p, err := loadPlan(args[0])
			if err != nil {
				return err
			}
			exe, _ := os.Executable()
			cells, err := runner.Describe(p, runner.Options{Simulate: c.Bool("simulate"), Exe: exe})
			if err != nil {
				return err
			}
			if c.Bool("json") {
				enc := json.NewEncoder(std.out)
				enc.SetIndent("", "  ")
				return enc.Encode(map[string]any{"plan": p.Name, "cells": cells})
			}
			fmt.Fprintf(std.out, "plan %s: %d cells (valid)\n", p.Name, len(cells))
			for _, cl := range cells {
				fmt.Fprintf(std.out, "\n%s  [%s]\n  argv: %s\n", cl.Cell.ID, cl.Cell.Key, shellQuote(cl.Argv))
				for _, k := range sortedEnvKeys(cl.Env) {
					fmt.Fprintf(std.out, "  env:  %s=%s\n", k, shellQuote([]string{cl.Env[k]}))
				}
			}
			return nil
		}),
	}
}

// shellQuote renders argv for a human to read or paste; the runner itself never uses a shell.
func shellQuote(argv []string) string {
	parts := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r == '-' || r == '_' || r == '.' || r == '/' || r == '=' || r == ',' || r == ':' || r == '+' ||
				(r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9'))
		}) < 0 {
			parts[i] = a
			continue
		}
		parts[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(parts, " ")
}

func sortedEnvKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
