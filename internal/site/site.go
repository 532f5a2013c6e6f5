// Package site chooses the site a reader reads: the primary bucket, or the
// second site (an independent bucket the copier fills with the primary's
// key layout under its own prefix; docs/restore.md#reading-the-second-site),
// by a mode:
//
//   - primary: the primary, as every command read it before a second site
//     existed;
//   - second: the second site (a usage error when none is configured);
//   - auto: the primary when it answers a bounded check (Check: one HEAD
//     of the bucket, or a one-key listing, within CheckTimeout), else,
//     when a second site is configured and the primary is unreachable
//     (Unreachable), the second site, said so (Chosen.Note).
//
// Only an unreachable primary falls back. A primary that answers and
// refuses (access denied, wrong credentials, a missing bucket) is a
// configuration the SRE must see, not one to paper over with another
// bucket's older copies: that error is returned, naming --site second.
// Without a second site, auto opens the primary without a check, exactly
// as before.
package site

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/usage"
)

// Mode is how the site is chosen (--site).
type Mode string

// The modes.
const (
	Primary Mode = "primary"
	Second  Mode = "second"
	Auto    Mode = "auto"
)

// Name is the site read: "primary" or "second".
type Name = Mode

// DefaultCheckTimeout bounds auto's check of the primary (--site-timeout):
// a frozen primary costs at most this before the second site is read.
const DefaultCheckTimeout = 10 * time.Second

// ParseMode parses --site; "" is Auto. Anything else is a usage error.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case "":
		return Auto, nil
	case Primary, Second, Auto:
		return m, nil
	}
	return "", usage.Errorf("--site %q: want primary, second or auto", s)
}

// Opener opens a site's store and its layout. It contacts nothing that
// the store's own Open does not.
type Opener func(ctx context.Context) (store.Store, catalog.Layout, error)

// Options choose a site.
type Options struct {
	Mode Mode
	// Primary opens the primary; Second the second site (nil: none is
	// configured).
	Primary, Second Opener
	// CheckTimeout bounds auto's check of the primary (0:
	// DefaultCheckTimeout).
	CheckTimeout time.Duration
	Log          *slog.Logger
}

// Chosen is the site read.
type Chosen struct {
	Site   Name
	Store  store.Store
	Layout catalog.Layout
	// PrimaryErr is why auto reads the second site: the primary is
	// unreachable (nil when it reads the site it was asked to).
	PrimaryErr error
}

// FellBack reports whether auto read the second site because the primary
// was unreachable.
func (c Chosen) FellBack() bool { return c.PrimaryErr != nil }

// Describe names the site read, for a report: "" for the primary,
// "second site", or "second site (the primary is unreachable: <cause>)"
// when auto fell back.
func (c Chosen) Describe() string {
	switch {
	case c.Site != Second:
		return ""
	case c.PrimaryErr != nil:
		return "second site (the primary is unreachable: " + c.PrimaryErr.Error() + ")"
	}
	return "second site"
}

// Note is the line a command prints when it fell back: "reading the
// second site: the primary is unreachable: <cause>" ("" when it did not).
func (c Chosen) Note() string {
	if c.PrimaryErr == nil {
		return ""
	}
	return "reading the second site: the primary is unreachable: " + c.PrimaryErr.Error()
}

// ErrNoSecondSite is --site second without a second site (a usage error).
var ErrNoSecondSite = errors.New("no second site is configured (--second-store, ETCD_RECOVERY_SECOND_STORE)")

// Choose opens the site opts.Mode asks for (see the package comment).
func Choose(ctx context.Context, opts Options) (Chosen, error) {
	mode, err := ParseMode(string(opts.Mode))
	if err != nil {
		return Chosen{}, err
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	switch {
	case mode == Second && opts.Second == nil:
		return Chosen{}, usage.Wrap(fmt.Errorf("--site second: %w", ErrNoSecondSite))
	case mode == Second:
		return open(ctx, Second, opts.Second, nil)
	case mode == Primary || opts.Second == nil:
		// Auto without a second site: the primary as before, unchecked
		// (its own calls fail as they always did).
		return open(ctx, Primary, opts.Primary, nil)
	}
	timeout := opts.CheckTimeout
	if timeout <= 0 {
		timeout = DefaultCheckTimeout
	}
	st, layout, err := opts.Primary(ctx)
	if err == nil {
		if err = Check(ctx, st, layout, timeout); err == nil {
			return Chosen{Site: Primary, Store: st, Layout: layout}, nil
		}
	}
	if ctx.Err() != nil {
		return Chosen{}, fmt.Errorf("checking the primary: %w", context.Cause(ctx))
	}
	if !Unreachable(err) {
		// The primary answered and refused (or its settings are wrong):
		// reading another bucket would hide that, and restore from older
		// copies than the SRE believes. Say so; --site second is one flag.
		return Chosen{}, fmt.Errorf("the primary answered but cannot be read (%w); not reading the second site instead: "+
			"fix the primary's settings or credentials, or read the second site with --site second", err)
	}
	log.Warn("reading the second site: the primary is unreachable", "err", err)
	c, serr := open(ctx, Second, opts.Second, err)
	if serr != nil {
		return Chosen{}, fmt.Errorf("the primary is unreachable (%v), and the second site could not be opened: %w", err, serr)
	}
	return c, nil
}

func open(ctx context.Context, name Name, o Opener, primaryErr error) (Chosen, error) {
	st, layout, err := o(ctx)
	if err != nil {
		return Chosen{}, err
	}
	return Chosen{Site: name, Store: st, Layout: layout, PrimaryErr: primaryErr}, nil
}

// Check asks st, within timeout, whether it answers: store.Checker's
// Check (the bucket exists and the credentials may use it: one HEAD, a
// one-key listing on a 403), else a listing of the layout's owner record
// (one key at most). A check that gets no answer within timeout is
// "no answer within <timeout>", wrapping context.DeadlineExceeded (so
// Unreachable); a cancelled ctx is ctx's error. A connection that cannot
// be made (refused: nothing listens) is not retried
// (store.FailFastOnConnect): it is judged unreachable at once, where the
// store's retries would fill the whole deadline; a 5xx or a throttle is
// retried within it, and a frozen server costs the deadline.
func Check(ctx context.Context, st store.Store, layout catalog.Layout, timeout time.Duration) error {
	cctx, cancel := context.WithTimeout(store.FailFastOnConnect(ctx), timeout)
	defer cancel()
	var err error
	if c, ok := st.(store.Checker); ok {
		err = c.Check(cctx)
	} else {
		_, err = st.List(cctx, catalog.OwnerKey(layout))
	}
	if err != nil && ctx.Err() == nil && cctx.Err() != nil {
		return fmt.Errorf("no answer within %v: %w", timeout, err)
	}
	return err
}

// Unreachable reports whether err says a store could not be reached, as
// opposed to answering: a network error, a timeout, a stall, a 5xx or a
// throttle (store.IsTransient), or a deadline. Access denied, wrong
// credentials and a missing bucket are answers (permanent errors): the
// store is there and says no.
func Unreachable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, store.ErrStalled) || store.IsTransient(err)
}
