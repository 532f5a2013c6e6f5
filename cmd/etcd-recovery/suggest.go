package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
	"github.com/xrash/smetrics"
)

// Suggestions for a mistyped command or flag: the closest visible name
// by Jaro-Winkler similarity (the measure urfave/cli's own Suggest
// uses), offered only when it is close enough to be what was meant.

// suggestThreshold is the least similarity a suggestion needs ("bakcup"
// and "backup": 0.96; "foo" and any command: below 0.6).
const suggestThreshold = 0.8

// closest is the name most like typed, or "" when none is close.
func closest(typed string, names []string) string {
	best, score := "", 0.0
	for _, n := range names {
		if s := smetrics.JaroWinkler(typed, n, 0.7, 4); s > score {
			best, score = n, s
		}
	}
	if score < suggestThreshold {
		return ""
	}
	return best
}

// commandSuggestion is " (did you mean \"backup\"?)" for "bakcup", or "".
func commandSuggestion(typed string, cmds []*cli.Command) string {
	var names []string
	for _, c := range cmds {
		if !c.Hidden {
			names = append(names, c.Names()...)
		}
	}
	if s := closest(typed, names); s != "" {
		return fmt.Sprintf(" (did you mean %q?)", s)
	}
	return ""
}

// withFlagSuggestion adds the closest of flags to the flag package's
// "flag provided but not defined: -x" error.
func withFlagSuggestion(err error, flags []cli.Flag) error {
	typed := undefinedFlag(err)
	if typed == "" {
		return err
	}
	var names []string
	for _, f := range flags {
		if vf, ok := f.(cli.VisibleFlag); ok && !vf.IsVisible() {
			continue
		}
		names = append(names, f.Names()...)
	}
	s := closest(typed, names)
	if s == "" {
		return err
	}
	dash := "--"
	if len(s) == 1 {
		dash = "-"
	}
	return fmt.Errorf("%w (did you mean %s%s?)", err, dash, s)
}

// suggestingUsageError wraps a command's OnUsageError: the error it is
// given names the closest flag of the command when one was mistyped.
func suggestingUsageError(flags func() []cli.Flag, next cli.OnUsageErrorFunc) cli.OnUsageErrorFunc {
	return func(c *cli.Context, err error, sub bool) error {
		if undefinedFlag(err) == "key" {
			// journal find's own hint names --key; a suggestion would
			// only repeat etcd's TLS flag.
			return next(c, err, sub)
		}
		return next(c, withFlagSuggestion(err, flags()), sub)
	}
}
