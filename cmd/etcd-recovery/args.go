package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

// Positional arguments. Only a command that declares them (ArgsUsage:
// journal find's KEY) takes any; noStrayArgs refuses them everywhere
// else. As etcdctl's `get KEY --prefix`, flags may follow the argument:
// urfave/cli stops parsing flags at the first argument, so takeArgs
// parses the rest itself, through the same flag set (c.Set: the bound
// options and IsSet see them as if given first).

type positionalKey struct{}

// positional is the command's positional arguments, with the flags that
// followed them taken out (takeArgs).
func positional(c *cli.Context) []string {
	if a, ok := c.Context.Value(positionalKey{}).([]string); ok {
		return a
	}
	return c.Args().Slice()
}

// takeArgs sets the flags given after the positional arguments and
// records the arguments alone for positional. An unknown flag goes to the
// command's OnUsageError as the flag package's own error would.
func takeArgs(c *cli.Context, cmd *cli.Command) (err error) {
	args := c.Args().Slice()
	var rest []string
	if dashedFirst(c, args) {
		// "find -- --log-level": the flag package took the "--" that
		// stood before every argument; what followed it is positional.
		c.Context = context.WithValue(c.Context, positionalKey{}, args)
		return nil
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			rest = append(rest, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			rest = append(rest, a)
			continue
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name == "help" || name == "h" {
			// As before the argument: the command's help, nothing run.
			tmpl := cmd.CustomHelpTemplate
			if tmpl == "" {
				tmpl = cli.CommandHelpTemplate
			}
			cli.HelpPrinter(c.App.Writer, tmpl, cmd)
			return errHelpShown
		}
		f := commandFlag(cmd, name)
		if f == nil {
			err := fmt.Errorf("flag provided but not defined: -%s", name)
			if cmd.OnUsageError != nil {
				return cmd.OnUsageError(c, err, true)
			}
			return asUsage(err)
		}
		if !hasVal {
			if _, isBool := f.(*cli.BoolFlag); isBool {
				val = "true"
			} else {
				if i+1 >= len(args) {
					return usagef("%s: flag needs an argument: --%s", cmd.FullName(), name)
				}
				i++
				val = args[i]
			}
		}
		if err := c.Set(name, val); err != nil {
			return usagef("%s: --%s %q: %v", cmd.FullName(), name, val, err)
		}
	}
	c.Context = context.WithValue(c.Context, positionalKey{}, rest)
	return nil
}

// rawArgsKey is the app's Metadata key of the command line as run gave it.
const rawArgsKey = "etcd-recovery/raw-args"

// errHelpShown: takeArgs printed the command's help (--help after an
// argument); the action does not run and the command exits 0.
var errHelpShown = errors.New("help shown")

// dashedFirst reports whether the command line has a "--" that the flag
// package consumed before args: a "--" whose following words are exactly
// args (a "--" after an argument stays in args and takeArgs sees it).
func dashedFirst(c *cli.Context, args []string) bool {
	raw, _ := c.App.Metadata[rawArgsKey].([]string)
	if len(args) == 0 || slices.Contains(args, "--") {
		return false
	}
	for i := len(raw) - 1; i >= 0; i-- {
		if raw[i] == "--" {
			return slices.Equal(raw[i+1:], args)
		}
	}
	return false
}

// commandFlag is cmd's flag of that name or alias (nil if none).
func commandFlag(cmd *cli.Command, name string) cli.Flag {
	for _, f := range cmd.Flags {
		if slices.Contains(f.Names(), name) {
			return f
		}
	}
	return nil
}

// undefinedFlag is the name of the unknown flag a parse error is about
// ("" for another error).
func undefinedFlag(err error) string {
	name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -")
	if !ok {
		return ""
	}
	name, _, _ = strings.Cut(name, " ")
	return name
}
