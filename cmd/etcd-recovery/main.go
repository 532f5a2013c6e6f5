// Command etcd-recovery backs up, restores, inspects and drills etcd
// clusters, alone or for every EtcdCluster of a Kubernetes namespace, and
// serves their metrics. It only wires flags to the feature packages
// (backup, restore, inspect, kube, metrics) and internal/catalog, one file
// per command: each builds the package's options, lets the package validate
// them (a usage error anywhere in the cause chain is exit 4), calls it and
// renders its report with internal/output (rep.Table() or rep.Tables(), or
// -o json of the report itself).
//
// setup.go is the one setup every command shares: its flags bind to an
// options struct (flags.go, Destination fields: no flag is read by name),
// newEnv builds the logger and the output format, and the env opens the
// object store through the registry (store.Open; the backends are linked
// by the blank import of internal/store/all, the only place the CLI names
// them), builds the Kubernetes client and bounds the run by --timeout
// (withTimeout, naming the step a step error's Step() reports). Stray
// arguments are refused one way, by noStrayArgs around every Action.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/usage"
	"github.com/armada/etcd-recovery/internal/version"
)

// Exit codes shared by every command (inspect adds its verdict codes).
const (
	exitOK       = 0
	exitFailure  = 1
	exitUsage    = 4
	exitCanceled = 130
)

// defaultMemoryLimit is the Go runtime's soft memory limit unless GOMEMLIMIT
// is set. Every stream is bounded by design (part buffers × concurrency, a
// 1 MiB zstd window, a 1 MiB receive queue: about 30 MiB live), so the limit
// only makes the GC return freed buffers promptly instead of letting RSS
// drift to twice the live heap. It is a soft limit: nothing fails above it.
const defaultMemoryLimit = 48 << 20

func main() {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(defaultMemoryLimit)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go handleSignals(sigs, cancel, os.Stderr, os.Exit)
	code := run(ctx, os.Args, os.Stdout, os.Stderr)
	signal.Stop(sigs)
	os.Exit(code)
}

// handleSignals turns SIGINT/SIGTERM into the run's cancellation: the
// first cancels the root context (the command cleans up: a backup in
// flight aborts its upload, for up to 30 s while the store recovers, and
// the exit is 130); a second one exits at once with 130, leaving whatever
// the cleanup had not finished (an incomplete backup has no manifest, and
// prune removes it and its upload later).
func handleSignals(sigs <-chan os.Signal, cancel context.CancelCauseFunc, stderr io.Writer, exit func(int)) {
	first, ok := <-sigs
	if !ok {
		return
	}
	fmt.Fprintf(stderr, "etcd-recovery: %s: cancelling and cleaning up (a second signal exits at once)\n", signalName(first))
	cancel(fmt.Errorf("%s received", signalName(first)))
	second, ok := <-sigs
	if !ok {
		return
	}
	fmt.Fprintf(stderr, "etcd-recovery: %s again: exiting now, cleanup unfinished (a backup left incomplete has no manifest; prune removes it and its upload)\n", signalName(second))
	// Plaintext never outlives the process: the scratch copies (the
	// drill-after-backup snapshot) are unlinked even on the hard exit,
	// where deferred cleanups do not run.
	if err := seal.RemoveAllScratch(); err != nil {
		fmt.Fprintf(stderr, "etcd-recovery: removing plaintext scratch files: %v\n", err)
	}
	exit(exitCanceled)
}

func signalName(s os.Signal) string {
	switch s {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return s.String()
}

// run is main without the process: tests call it directly.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	app := newApp(stdout, stderr)
	app.Metadata[rawArgsKey] = args
	err := app.RunContext(ctx, args)
	if name, ok := app.Metadata[unknownCommandKey].(string); ok && err == nil {
		err = usagef("unknown command %q%s (commands: %s; see --help)", name, commandSuggestion(name, app.Commands),
			strings.Join(commandNames(app.Commands), ", "))
	}
	switch {
	case err == nil:
		return exitOK
	case ctx.Err() != nil:
		fmt.Fprintf(stderr, "etcd-recovery: cancelled: %v\n", err)
		return exitCanceled
	}
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		if msg := err.Error(); msg != "" {
			fmt.Fprintf(stderr, "etcd-recovery: %s\n", msg)
		}
		return ec.ExitCode()
	}
	if usage.Is(err) {
		// Bad flags, or options a package refused before contacting
		// anything (its step error wraps a usage.Error).
		fmt.Fprintf(stderr, "etcd-recovery: %v\n", err)
		return exitUsage
	}
	fmt.Fprintf(stderr, "etcd-recovery: %v\n", err)
	return exitFailure
}

// usagef is a usage error (exit 4): bad flags or configuration, the
// same type (usage.Error) the domain packages return for options they
// refuse.
func usagef(format string, a ...any) error { return usage.Errorf(format, a...) }

// asUsage marks err a usage error.
func asUsage(err error) error { return usage.Wrap(err) }

func newApp(stdout, stderr io.Writer) *cli.App {
	g := &globalOpts{}
	app := &cli.App{
		Name:    "etcd-recovery",
		Usage:   "back up, inspect and restore etcd clusters (COS / S3)",
		Version: version.Version,
		Writer:  stdout, ErrWriter: stderr,
		Flags:  g.flags(),
		Before: func(*cli.Context) error { return startProfile(g.cpuProfile) },
		After:  stopProfile,
		Commands: []*cli.Command{
			backupCommand(g),
			listCommand(g),
			sitesCommand(g),
			pruneCommand(g),
			deleteCommand(g),
			inspectCommand(g),
			restoreCommand(g),
			restoreAllCommand(g),
			undeleteCommand(g),
			drillCommand(g),
			serveCommand(g),
			journalCommand(g),
			replicateCommand(g),
			versionCommand(g),
			completionCommand(),
		},
		// `--generate-bash-completion` lists the commands or flags that
		// may come next: the completion scripts call it.
		EnableBashCompletion: true,
		// Errors are printed once, by run.
		ExitErrHandler: func(*cli.Context, error) {},
	}
	app.OnUsageError = suggestingUsageError(func() []cli.Flag { return app.Flags }, onUsageError)
	// An unknown command (`etcd-recovery foo`, `etcd-recovery help foo`)
	// is recorded here and made a usage error by run: urfave/cli's own
	// answer is exit 3, which is inspect's UNREACHABLE.
	app.Metadata = map[string]any{}
	app.CommandNotFound = func(_ *cli.Context, name string) { app.Metadata[unknownCommandKey] = name }
	var walk func(string, []*cli.Command)
	walk = func(parent string, cmds []*cli.Command) {
		for _, c := range cmds {
			name := strings.TrimSpace(parent + " " + c.Name)
			if c.OnUsageError == nil {
				c.OnUsageError = onUsageError
			}
			cmd := c
			c.OnUsageError = suggestingUsageError(func() []cli.Flag { return cmd.Flags }, c.OnUsageError)
			// The global flags are accepted after the command too.
			c.Flags = append(c.Flags, g.commandFlags()...)
			if c.Action != nil {
				c.Action = noStrayArgs(name, c, applyGlobals(g, applyDeprecated(name, c.Action)))
				if usesScratch(name, c) {
					c.Action = withLeftoversRemoved(g, c, c.Action)
				}
				c.Action = applyGlobals(g, c.Action)
			}
			walk(name, c.Subcommands)
		}
	}
	walk("", app.Commands)
	return app
}

const unknownCommandKey = "etcd-recovery/unknown-command"

func commandNames(cmds []*cli.Command) []string {
	var names []string
	for _, c := range cmds {
		if !c.Hidden && c.Name != "help" {
			names = append(names, c.Name)
		}
	}
	return names
}

// usesScratch says whether a command writes plaintext scratch (it takes
// --temp-dir) or is the toolkit's long-lived process (serve): those remove
// the leftovers of earlier processes when they start.
func usesScratch(name string, cmd *cli.Command) bool {
	if name == "serve" {
		return true
	}
	for _, f := range cmd.Flags {
		if slices.Contains(f.Names(), "temp-dir") {
			return true
		}
	}
	return false
}

// withLeftoversRemoved runs action after removing, from the scratch root
// (--temp-dir, and $TMPDIR, else /tmp), the plaintext scratch that earlier
// processes of this tool left when they were killed (SIGKILL, the OOM
// killer, a second signal that beat its cleanup): only names this tool
// writes, tagged with a process that is gone (seal.RemoveLeftovers).
func withLeftoversRemoved(g *globalOpts, cmd *cli.Command, action cli.ActionFunc) cli.ActionFunc {
	tempDir := boundString(cmd, "temp-dir")
	return func(c *cli.Context) error {
		log, err := g.logger(c)
		if err != nil {
			return err
		}
		roots := []string{os.TempDir()}
		if d := tempDir(); d != "" && filepath.Clean(d) != filepath.Clean(roots[0]) {
			roots = append(roots, d)
		}
		for _, root := range roots {
			removed, err := seal.RemoveLeftovers(root)
			for _, p := range removed {
				log.Info("removed plaintext scratch left by an earlier process of this tool", "path", p)
			}
			if err != nil {
				log.Warn("could not remove all plaintext scratch left by earlier processes", "dir", root, "err", err)
			}
		}
		return action(c)
	}
}

// boundString reads the bound value (Destination) of the command's string
// flag name ("" when it has none).
func boundString(cmd *cli.Command, name string) func() string {
	for _, f := range cmd.Flags {
		if sf, ok := f.(*cli.StringFlag); ok && sf.Name == name && sf.Destination != nil {
			return func() string { return *sf.Destination }
		}
	}
	return func() string { return "" }
}

// onUsageError turns flag parsing errors into usage errors (exit 4).
func onUsageError(_ *cli.Context, err error, _ bool) error { return asUsage(err) }

var profileFile *os.File

func startProfile(path string) error {
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return usagef("--cpu-profile: %v", err)
	}
	profileFile = f
	return pprof.StartCPUProfile(f)
}

func stopProfile(*cli.Context) error {
	if profileFile != nil {
		pprof.StopCPUProfile()
		return profileFile.Close()
	}
	return nil
}
