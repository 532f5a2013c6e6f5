package seal_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/armada/etcd-recovery/internal/seal"
)

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// TestOpenHeader: an identity of a recipient opens the header, reading no
// more than the header's neighbourhood; a stranger's identity, or none,
// fails with ErrNoIdentity naming the recipients and the stanza count; a
// damaged or cut header is ErrTampered; a source error is itself.
func TestOpenHeader(t *testing.T) {
	t.Parallel()
	a, pubA := newKey(t)
	b, pubB := newKey(t)
	stranger, pubS := newKey(t)
	rs := recipients(t, pubA, pubB)
	ct := seal1(t, randomBytes(1<<20, 9), rs)
	hl := headerLen(t, ct)

	for _, id := range []*seal.Identities{identities(t, a), identities(t, b), identities(t, stranger, b)} {
		cr := &countingReader{r: bytes.NewReader(ct)}
		if err := seal.OpenHeader(cr, id, rs.Strings()); err != nil {
			t.Errorf("OpenHeader with %v: %v", id, err)
		}
		// bufio reads 4 KiB at a time: the header, not the 1 MiB payload.
		if cr.n > 8<<10 {
			t.Errorf("OpenHeader read %d bytes of a 1 MiB object; want only its header (%d bytes)", cr.n, hl)
		}
	}
	// Only the header is needed.
	if err := seal.OpenHeader(bytes.NewReader(ct[:hl]), identities(t, a), rs.Strings()); err != nil {
		t.Errorf("OpenHeader of the header alone: %v", err)
	}

	err := seal.OpenHeader(bytes.NewReader(ct), identities(t, stranger), rs.Strings())
	var nm *seal.NoMatchError
	if !errors.Is(err, seal.ErrNoIdentity) || !errors.As(err, &nm) || errors.Is(err, seal.ErrTampered) {
		t.Fatalf("OpenHeader with a stranger's identity: %v; want a *NoMatchError (ErrNoIdentity)", err)
	}
	for _, want := range []string{pubA, pubB, pubS, "2 recipient stanzas (X25519, X25519)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "AGE-SECRET-KEY") {
		t.Errorf("error %q shows a secret key", err)
	}

	for _, ids := range []*seal.Identities{nil, {}} {
		err := seal.OpenHeader(bytes.NewReader(ct), ids, rs.Strings())
		if !errors.Is(err, seal.ErrNoIdentity) || !strings.Contains(err.Error(), "no identity mounted") || !strings.Contains(err.Error(), pubA) {
			t.Errorf("OpenHeader with no identities: %v; want ErrNoIdentity saying no identity is mounted, naming the recipients", err)
		}
	}

	// Damage: not age at all, a flipped MAC byte, cut inside the header.
	macAt := hl - 10
	flipped := bytes.Clone(ct)
	flipped[macAt] ^= 0x01
	for name, src := range map[string][]byte{
		"plaintext":  []byte("this is a zstd stream, not age\n" + strings.Repeat("x", 5000)),
		"bad MAC":    flipped,
		"cut header": ct[:hl/2],
		"empty":      nil,
		"endless":    append([]byte("age-encryption.org/v1\n-> X25519 "), bytes.Repeat([]byte("a"), seal.HeaderReadLimit+10)...),
	} {
		err := seal.OpenHeader(bytes.NewReader(src), identities(t, a), rs.Strings())
		if !errors.Is(err, seal.ErrTampered) || errors.Is(err, seal.ErrNoIdentity) {
			t.Errorf("OpenHeader of %s: %v; want ErrTampered", name, err)
		}
	}

	// A transport error is returned as it is.
	errNet := fmt.Errorf("connection reset by peer: %w", io.ErrUnexpectedEOF)
	err = seal.OpenHeader(&failingReader{r: bytes.NewReader(ct), n: 20, err: errNet}, identities(t, a), rs.Strings())
	if !errors.Is(err, errNet) || errors.Is(err, seal.ErrTampered) || errors.Is(err, seal.ErrNoIdentity) {
		t.Errorf("OpenHeader over a failing source: %v; want the source's error", err)
	}
}
