package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/internal/store"
	_ "github.com/armada/etcd-recovery/internal/store/all" // the backends store.Open builds
	"github.com/armada/etcd-recovery/kube"
)

// The one setup of every command. A command's flags are bound to its
// options struct (flags.go: each flag group's Destination fields); its
// Action starts with newEnv, which builds the logger and the output
// format, then asks the env for what it needs, in the order its checks
// require (the options are validated before anything is contacted):
// the object store and its layout (openStore, through store.OpenURL), the
// Kubernetes client (kube) and the --timeout context (withTimeout). Stray
// arguments are refused before any Action (noStrayArgs), and a failed
// step is named by stepOf.

// env is a command's run: its context, logger, output format and writers.
type env struct {
	c      *cli.Context
	log    *slog.Logger
	format output.Format
}

// newEnv builds the logger (--log-level, --log-format) and parses the
// output format (-o; "" for a command without one). Their errors are
// usage errors.
func newEnv(c *cli.Context, g *globalOpts, format string) (*env, error) {
	log, err := g.logger(c)
	if err != nil {
		return nil, err
	}
	e := &env{c: c, log: log}
	if format != "" {
		if e.format, err = output.ParseFormat(format); err != nil {
			return nil, asUsage(err)
		}
	}
	return e, nil
}

// ctx is the run's context (cancelled by the first signal).
func (e *env) ctx() context.Context { return e.c.Context }

// render writes one table, or -o json of v.
func (e *env) render(t output.Table, v any) error {
	return output.Render(e.c.App.Writer, e.format, t, v)
}

// renderAll writes tables, or -o json of v.
func (e *env) renderAll(ts []output.Table, v any) error {
	return output.RenderAll(e.c.App.Writer, e.format, ts, v)
}

// kube builds the Kubernetes client of --kubeconfig and --namespace.
func (e *env) kube(o *kubeOpts) (*kube.Client, error) {
	k, err := kube.New(kube.Config{Kubeconfig: o.kubeconfig, Namespace: o.namespace})
	if err != nil {
		return nil, asUsage(err)
	}
	return k, nil
}

// openStore opens the object store (store.OpenURL) of --store, or of the
// COS flags written as the same URL (storeOpts.location), and its layout.
// The flags are checked first. With k, the namespace's credentials secret
// (read through the API) is the fallback when none are mounted or in the
// environment; an error reading it is returned as it is, every other
// error is a usage error (exit 4).
func (e *env) openStore(o *storeOpts, k *kube.Client) (store.Store, catalog.Layout, error) {
	raw, loc, err := o.location(e.c)
	if err != nil {
		return nil, catalog.Layout{}, err
	}
	prefix, _ := catalog.ValidatePrefix(loc.Prefix) // checked by location
	if o.maxRetries < 0 {
		return nil, catalog.Layout{}, usagef("--cos-max-retries %d: want 0 or more", o.maxRetries)
	}
	if o.stallTimeout <= 0 {
		return nil, catalog.Layout{}, usagef("--cos-stall-timeout %v: must be positive", o.stallTimeout)
	}
	settings := store.Config{
		CredentialsDir: o.credsDir,
		Getenv:         os.Getenv,
		MaxRetries:     o.maxRetries,
		StallTimeout:   o.stallTimeout,
		MinThroughput:  o.minThroughput,
	}
	var secretErr error
	if k != nil {
		settings.FallbackCredentials = func(ctx context.Context) (*store.SecretFiles, error) {
			sec, err := k.COSCredentials(ctx, "")
			if err != nil {
				secretErr = err
				return nil, err
			}
			return &store.SecretFiles{Source: sec.Source(), Files: sec.Data}, nil
		}
	}
	st, err := store.OpenURL(e.ctx(), raw, settings)
	switch {
	case err != nil && secretErr != nil:
		return nil, catalog.Layout{}, err
	case err != nil:
		return nil, catalog.Layout{}, asUsage(err)
	}
	return st, catalog.Layout{Prefix: prefix}, nil
}

// openSecondStore opens the second site (--second-store) with its own
// credential (--second-credentials-dir, or the SECOND_-prefixed
// variables: secondGetenv), never the primary's, and with no Kubernetes
// fallback: the primary's secret is never read for it. Its errors are
// usage errors (exit 4).
func (e *env) openSecondStore(o *secondStoreOpts) (store.Store, catalog.Layout, error) {
	if !o.configured() {
		return nil, catalog.Layout{}, usagef("%s: --second-store (%s) is required", e.c.Command.FullName(), envSecondStore)
	}
	cfg, err := store.ParseURL(o.url)
	if err != nil {
		return nil, catalog.Layout{}, usagef("--second-store: %v", err)
	}
	prefix, err := catalog.ValidatePrefix(cfg.Prefix)
	if err != nil {
		return nil, catalog.Layout{}, usagef("--second-store's prefix: %v", err)
	}
	if err := validateEndpoint("--second-store's endpoint=", cfg.Endpoint); err != nil {
		return nil, catalog.Layout{}, asUsage(err)
	}
	st, err := store.OpenURL(e.ctx(), o.url, store.Config{CredentialsDir: o.credsDir, Getenv: secondGetenv, MaxRetries: 5})
	if err != nil {
		return nil, catalog.Layout{}, asUsage(err)
	}
	return st, catalog.Layout{Prefix: prefix}, nil
}

// runTimeout is the run bounded by --timeout: its context, and the words
// for an error the deadline (not a signal) caused.
type runTimeout struct {
	ctx     context.Context
	cancel  context.CancelFunc
	parent  context.Context
	limit   time.Duration
	command string
}

// withTimeout bounds the run by limit (--timeout, which must be
// positive). With cause, context.Cause of the run's context is cause once
// the deadline passes (a restore dry run names it so in every step's
// error). Call cancel when done.
func (e *env) withTimeout(limit time.Duration, cause error) (*runTimeout, error) {
	if limit <= 0 {
		return nil, usagef("%s: --timeout must be positive, got %v", e.c.Command.Name, limit)
	}
	t := &runTimeout{parent: e.ctx(), limit: limit, command: e.c.Command.Name}
	if cause != nil {
		t.ctx, t.cancel = context.WithTimeoutCause(t.parent, limit, cause)
	} else {
		t.ctx, t.cancel = context.WithTimeout(t.parent, limit)
	}
	return t, nil
}

// kubeStore is the Kubernetes client of ko (kube) and the store of so
// opened with it (openStore: the namespace's COS secret as a fallback).
func (e *env) kubeStore(ko *kubeOpts, so *storeOpts) (*kube.Client, store.Store, catalog.Layout, error) {
	k, err := e.kube(ko)
	if err != nil {
		return nil, nil, catalog.Layout{}, err
	}
	st, layout, err := e.openStore(so, k)
	if err != nil {
		return nil, nil, catalog.Layout{}, err
	}
	return k, st, layout, nil
}

// storeWithTimeout opens the store of o (openStore) and then starts the
// --timeout deadline limit (withTimeout, no cause); the caller defers
// t.cancel().
func (e *env) storeWithTimeout(o *storeOpts, k *kube.Client, limit time.Duration) (store.Store, catalog.Layout, *runTimeout, error) {
	st, layout, err := e.openStore(o, k)
	if err != nil {
		return nil, catalog.Layout{}, nil, err
	}
	t, err := e.withTimeout(limit, nil)
	if err != nil {
		return nil, catalog.Layout{}, nil, err
	}
	return st, layout, t, nil
}

// dryRunTimeout is withTimeout for a dry run, whose every step's error
// then names the deadline: "<command> --dry-run: the overall deadline
// (--timeout <limit>) passed" (caused).
func (e *env) dryRunTimeout(limit time.Duration) (*runTimeout, error) {
	return e.withTimeout(limit, fmt.Errorf("%s --dry-run: the overall deadline (--timeout %v) passed", e.c.Command.Name, limit))
}

// expired reports whether the deadline ended the run (not a signal).
func (t *runTimeout) expired() bool {
	return t.ctx.Err() != nil && t.parent.Err() == nil && errors.Is(t.ctx.Err(), context.DeadlineExceeded)
}

// atStep names the step and the limit when err came from the deadline:
// "<command>: timed out after <limit> (--timeout) at step <step>: <err>".
func (t *runTimeout) atStep(step string, err error) error {
	if err != nil && t.expired() {
		return fmt.Errorf("%s: timed out after %s (--timeout) at step %q: %w", t.command, t.limit, step, err)
	}
	return err
}

// overall names the limit when err came from the deadline, for an error
// that names its step itself: "<command>: the overall deadline passed
// (--timeout <limit>): <err>".
func (t *runTimeout) overall(err error) error {
	if err != nil && t.expired() {
		return fmt.Errorf("%s: the overall deadline passed (--timeout %v): %w", t.command, t.limit, err)
	}
	return err
}

// caused puts the deadline's cause (withTimeout's) before err when the
// deadline ended the run.
func (t *runTimeout) caused(err error) error {
	if err != nil && t.parent.Err() == nil && t.ctx.Err() != nil {
		return fmt.Errorf("%w: %v", context.Cause(t.ctx), err)
	}
	return err
}

// stepOf is the step a failed run stopped at: that of the outermost error
// of the chain with a Step() method (every step error has one); ok is
// false when no error of the chain names a step.
func stepOf(err error) (step string, ok bool) {
	var se interface{ Step() string }
	if errors.As(err, &se) {
		return se.Step(), true
	}
	return "", false
}

// named is atStep at the step err names (stepOf); err as it is when it
// names none.
func (t *runTimeout) named(err error) error {
	if step, ok := stepOf(err); ok {
		return t.atStep(step, err)
	}
	return err
}

// atStepOf is atStep at the step err names (stepOf), else at def.
func (t *runTimeout) atStepOf(def string, err error) error {
	if step, ok := stepOf(err); ok {
		return t.atStep(step, err)
	}
	return t.atStep(def, err)
}

// noStrayArgs refuses positional arguments where a command declares none
// (ArgsUsage; journal find's KEY is the one that does: its arguments and
// the flags after them are read by takeArgs), and an ignored `list c1` or `inspect extra` would run
// on something other than what the SRE meant. A flag after a positional
// argument is not parsed by the flag package, so it is named too. It
// wraps every command's Action (newApp): the one place stray arguments
// are refused.
func noStrayArgs(name string, cmd *cli.Command, action cli.ActionFunc) cli.ActionFunc {
	return func(c *cli.Context) error {
		if cmd.ArgsUsage != "" {
			if err := takeArgs(c, cmd); errors.Is(err, errHelpShown) {
				return nil
			} else if err != nil {
				return err
			}
			return action(c)
		}
		if c.Args().Present() {
			arg := c.Args().First()
			hint := "every input is a flag"
			if subs := commandNames(cmd.Subcommands); len(subs) > 0 {
				hint = fmt.Sprintf("subcommands: %s; every other input is a flag", strings.Join(subs, ", "))
			}
			if strings.HasPrefix(arg, "-") {
				return usagef("%s: unexpected argument %q: flags go before any argument", name, arg)
			}
			return usagef("%s: unexpected argument %q (%s)", name, arg, hint)
		}
		return action(c)
	}
}
