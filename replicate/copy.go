package replicate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/store"
)

// want is what an object must be, when known before it is read (a
// manifest's stored size and sha256 of the objects it names).
type want struct {
	size int64
	sha  string
}

// outcome is what a copy found.
type outcome int

const (
	copied     outcome = iota + 1 // written and read back
	already                       // on the second site with the same bytes
	superseded                    // a record replaced on the primary: the second site keeps its first copy
)

// Where a failure is: the copier backs off a failing site.
const (
	sitePrimary = "primary"
	siteSecond  = "second site"
)

// siteError is a store failure of one site.
type siteError struct {
	site string
	err  error
}

func (e *siteError) Error() string { return e.site + ": " + e.err.Error() }
func (e *siteError) Unwrap() error { return e.err }

// VerifyError is a verification failure: an object whose bytes are not
// what they must be (a primary object that does not match its manifest,
// an object already on the second site with other bytes, a copy that
// reads back otherwise). Nothing is overwritten; it is recorded in the
// status record's failures.
type VerifyError struct {
	Key    string
	Reason string
}

func (e *VerifyError) Error() string { return e.Key + ": " + e.Reason }

// failedSite says which site an error is from ("" when neither: a
// verification failure, a damaged record).
func failedSite(err error) string {
	var se *siteError
	if errors.As(err, &se) {
		return se.site
	}
	return ""
}

// errNotAsManifest fails a copy's read when the primary's bytes are not
// the manifest's: the create-only PUT fails with it, storing nothing.
var errNotAsManifest = errors.New("the primary's bytes are not the ones its manifest names")

// hashReader hashes what it reads; with want, at the end it fails the read
// when size or sha256 differ (so the PUT it feeds stores nothing).
type hashReader struct {
	r        io.Reader
	h        hash.Hash
	n        int64
	want     *want
	readErr  error
	mismatch string
}

func (hr *hashReader) Read(p []byte) (int, error) {
	n, err := hr.r.Read(p)
	hr.h.Write(p[:n])
	hr.n += int64(n)
	switch {
	case err == io.EOF && hr.want != nil:
		if sum := hr.sum(); hr.n != hr.want.size || sum != hr.want.sha {
			hr.mismatch = fmt.Sprintf("the primary's object is %d bytes of sha256 %s, its manifest says %d bytes of sha256 %s: not copied", hr.n, sum, hr.want.size, hr.want.sha)
			return n, errNotAsManifest
		}
	case err != nil && err != io.EOF:
		hr.readErr = err
	}
	return n, err
}

func (hr *hashReader) sum() string { return hex.EncodeToString(hr.h.Sum(nil)) }

// copyResult is one copy's outcome and its cost.
type copyResult struct {
	outcome outcome
	bytes   int64
	// verify is the time and bytes the read-back took.
	verify      time.Duration
	verifyBytes int64
}

// copyObject copies the primary's src to the second site's dst,
// create-only, with ret when set: streamed and hashed, then read back
// from the second site and compared. w, when known, is what src must be
// (checked before the PUT completes: a mismatch stores nothing). An
// object already at dst is compared instead: the same sha256 is already;
// other bytes are a *VerifyError, or superseded for a mutable record.
func (c *copier) copyObject(ctx context.Context, src, dst string, w *want, ret *store.Retention, mutable bool) (copyResult, error) {
	rc, err := c.o.Primary.Get(ctx, src)
	if err != nil {
		return copyResult{}, &siteError{sitePrimary, err}
	}
	defer rc.Close()
	hr := &hashReader{r: rc, h: sha256.New(), want: w}
	n, err := c.second.create(ctx, dst, hr, ret)
	switch {
	case hr.mismatch != "":
		return copyResult{}, &VerifyError{Key: src, Reason: hr.mismatch}
	case hr.readErr != nil && !errors.Is(err, store.ErrExists):
		return copyResult{}, &siteError{sitePrimary, hr.readErr}
	case errors.Is(err, store.ErrExists):
		rc.Close()
		return c.compareExisting(ctx, src, dst, w, mutable)
	case err != nil:
		return copyResult{}, &siteError{siteSecond, err}
	}
	// The read back: what the second site now holds is what was read.
	// A store's PUT may stop reading short of EOF (at a size it was
	// told): drain first, and a mismatch with the manifest found only
	// then fails the copy (the second site's object, create-only, stays
	// as written, and no manifest is copied after it).
	if _, err := io.Copy(io.Discard, hr); hr.mismatch != "" {
		return copyResult{bytes: n}, &VerifyError{Key: src, Reason: fmt.Sprintf("%s; found after the second site's PUT had stored %d bytes at %s (kept, create-only): the backup's manifest is not copied", strings.TrimSuffix(hr.mismatch, ": not copied"), n, dst)}
	} else if err != nil {
		return copyResult{}, &siteError{sitePrimary, err}
	}
	start := time.Now()
	sum, got, err := hashOf(ctx, c.second.get, dst)
	res := copyResult{outcome: copied, bytes: n, verify: time.Since(start), verifyBytes: got}
	if err != nil {
		return res, &siteError{siteSecond, fmt.Errorf("reading the copy back: %w", err)}
	}
	if want := hr.sum(); sum != want || got != hr.n {
		return res, &VerifyError{Key: dst, Reason: fmt.Sprintf("the copy reads back as %d bytes of sha256 %s, %d bytes of sha256 %s were written", got, sum, hr.n, want)}
	}
	return res, nil
}

// compareExisting compares an object already on the second site with the
// primary's (or with w, when known).
func (c *copier) compareExisting(ctx context.Context, src, dst string, w *want, mutable bool) (copyResult, error) {
	there, n, err := hashOf(ctx, c.second.get, dst)
	if err != nil {
		return copyResult{}, &siteError{siteSecond, fmt.Errorf("reading the object already there: %w", err)}
	}
	res := copyResult{outcome: already, verifyBytes: n}
	if w != nil && there == w.sha && n == w.size {
		return res, nil
	}
	primary, pn, err := hashOf(ctx, c.o.Primary.Get, src)
	if err != nil {
		return copyResult{}, &siteError{sitePrimary, err}
	}
	if primary == there && pn == n {
		if w != nil {
			return copyResult{}, &VerifyError{Key: src, Reason: fmt.Sprintf("the primary's object is %d bytes of sha256 %s, its manifest says %d bytes of sha256 %s (the second site holds the same bytes)", pn, primary, w.size, w.sha)}
		}
		return res, nil
	}
	if mutable {
		res.outcome = superseded
		return res, nil
	}
	return copyResult{}, &VerifyError{Key: dst, Reason: fmt.Sprintf("already on the second site with other bytes: sha256 %s there (%d bytes), %s on the primary (%d bytes); kept, not overwritten", there, n, primary, pn)}
}

// hashOf reads an object whole and returns its sha256 and size.
func hashOf(ctx context.Context, get func(context.Context, string) (io.ReadCloser, error), key string) (string, int64, error) {
	rc, err := get(ctx, key)
	if err != nil {
		return "", 0, err
	}
	defer rc.Close()
	h := sha256.New()
	n, err := io.Copy(h, rc)
	if err != nil {
		return "", n, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
