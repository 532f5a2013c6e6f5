package seal

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"filippo.io/age"

	"github.com/armada/etcd-recovery/internal/output"
)

// ErrTampered marks an encrypted object that does not authenticate: a
// damaged or tampered header or payload, a truncated object, trailing
// data, or something that is not an age file at all. Retrying the read
// does not help; restore refuses the object. Errors from the source reader
// itself (network, context) are returned as they are, never as
// ErrTampered.
var ErrTampered = errors.New("encrypted object damaged or tampered with")

// ErrNoIdentity marks a backup that none of the given identities can
// decrypt; the error is a *NoMatchError naming the recipients.
var ErrNoIdentity = errors.New("no age identity matches")

// TamperError is an ErrTampered with where it was found.
type TamperError struct {
	// Part is "header", "payload" or "truncated".
	Part string
	// Detail is age's description; it never holds key material.
	Detail string
}

func (e *TamperError) Error() string {
	switch e.Part {
	case "truncated":
		return fmt.Sprintf("%v: truncated (%s)", ErrTampered, e.Detail)
	default:
		return fmt.Sprintf("%v: %s does not authenticate (%s)", ErrTampered, e.Part, e.Detail)
	}
}

// Is makes errors.Is(err, ErrTampered) true. TamperError deliberately does
// not unwrap to age's error: a truncation would otherwise look like
// io.ErrUnexpectedEOF, which retry loops treat as transient.
func (e *TamperError) Is(target error) bool { return target == ErrTampered }

// NoMatchError: none of the identities can decrypt the backup.
type NoMatchError struct {
	// Recipients the backup was encrypted to (from its manifest); empty
	// when unknown.
	Recipients []string
	// Identities are the public keys of the identities that were tried.
	Identities []string
}

func (e *NoMatchError) Error() string {
	to := "recipients not recorded"
	if len(e.Recipients) > 0 {
		to = "it was encrypted to " + strings.Join(e.Recipients, ", ")
	}
	return fmt.Sprintf("%v: %s; the identity file holds %s: use the identity of one of the backup's recipients",
		ErrNoIdentity, to, output.Plural(len(e.Identities), "the identity of "+strings.Join(e.Identities, ", "), "identities of "+strings.Join(e.Identities, ", ")))
}

// Is makes errors.Is(err, ErrNoIdentity) true.
func (e *NoMatchError) Is(target error) bool { return target == ErrNoIdentity }

// Encrypt returns a writer that encrypts to rs and writes the age file to
// dst: the header at once, then the payload in 64 KiB chunks. Close writes
// the last chunk; it does not close dst. The caller compresses before
// encrypting (zstd writer → Encrypt → upload): ciphertext does not
// compress.
func Encrypt(dst io.Writer, rs Recipients) (io.WriteCloser, error) {
	if rs.Len() == 0 {
		return nil, ErrNoRecipients
	}
	w, err := age.Encrypt(dst, rs.ageRecipients()...)
	if err != nil {
		return nil, fmt.Errorf("age: starting encryption to %s: %w", rs, err)
	}
	return w, nil
}

// Decrypt reads the age header from src and returns the plaintext reader.
// wantRecipients are the recipients the manifest records, named when no
// identity matches (*NoMatchError, ErrNoIdentity). Header damage is
// reported here, payload damage and truncation by Read, both as
// ErrTampered; the plaintext is authenticated chunk by chunk, and a
// truncation is only seen at the end, so a caller must not act on the data
// before Read returned io.EOF (restore checks the sha256 too).
func Decrypt(src io.Reader, ids *Identities, wantRecipients []string) (io.Reader, error) {
	if ids.Len() == 0 {
		return nil, errors.New("no age identity given (--identity-file): the backup is encrypted")
	}
	t := &srcTracker{r: src}
	r, err := age.Decrypt(t, ids.ageIdentities()...)
	if err != nil {
		return nil, classifyHeader(err, t, ids, wantRecipients)
	}
	return &decryptReader{r: r, src: t}, nil
}

func classifyHeader(err error, t *srcTracker, ids *Identities, want []string) error {
	if t.err != nil {
		return fmt.Errorf("reading the age header: %w", t.err)
	}
	var nm *age.NoIdentityMatchError
	if errors.As(err, &nm) {
		for _, p := range ids.pubs {
			if slices.Contains(want, p) {
				// The manifest says the backup was encrypted to this
				// identity, yet its stanza does not open: the header was
				// altered (or the manifest belongs to another object).
				return &TamperError{Part: "header", Detail: "the recipient stanza for " + p + " does not open with its identity"}
			}
		}
		return &NoMatchError{Recipients: slices.Clone(want), Identities: ids.Recipients()}
	}
	// age wraps some of these with %v: look at the text as well.
	if msg := err.Error(); errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		strings.Contains(msg, "EOF") || strings.Contains(msg, "file is empty") || strings.Contains(msg, "failed to read nonce") {
		return &TamperError{Part: "truncated", Detail: err.Error()}
	}
	return &TamperError{Part: "header", Detail: err.Error()}
}

// srcTracker remembers the first error of the source reader other than
// io.EOF, to tell transport errors from damage.
type srcTracker struct {
	r   io.Reader
	err error
}

func (t *srcTracker) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if err != nil && err != io.EOF && t.err == nil {
		t.err = err
	}
	return n, err
}

type decryptReader struct {
	r   io.Reader
	src *srcTracker
	err error
}

func (d *decryptReader) Read(p []byte) (int, error) {
	if d.err != nil {
		return 0, d.err
	}
	n, err := d.r.Read(p)
	if err != nil {
		switch {
		case err == io.EOF:
		case d.src.err != nil:
			err = d.src.err
		case errors.Is(err, io.ErrUnexpectedEOF):
			err = &TamperError{Part: "truncated", Detail: "the object ends before age's last chunk"}
		default:
			err = &TamperError{Part: "payload", Detail: err.Error()}
		}
		d.err = err
	}
	return n, err
}
