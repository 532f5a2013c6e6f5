package seal

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"

	"filippo.io/age"
)

// HeaderReadLimit bounds how much of an object OpenHeader reads: the age
// header is the intro line, one stanza per recipient (about 100 bytes for
// X25519) and the MAC. A header longer than this is refused as damaged.
const HeaderReadLimit = 64 << 10

// OpenHeader reads only the age header at the start of src and unwraps its
// file key with ids, proving that an identity opens the object without
// reading or decrypting its payload. It returns nil when one does.
//
// When none does, the error wraps ErrNoIdentity and names the recipients
// the manifest records (wantRecipients), the identities tried and the
// number of recipient stanzas in the header; with no identities at all
// (nil or empty ids) it wraps ErrNoIdentity and says no identity is
// mounted. A damaged header (not age, a bad MAC, a stanza of a recorded
// recipient that its identity does not open, cut short) wraps
// ErrTampered. An error of src itself is returned as it is, neither of
// the two.
//
// At most HeaderReadLimit bytes are read from src; src is not closed.
func OpenHeader(src io.Reader, ids *Identities, wantRecipients []string) error {
	if ids.Len() == 0 {
		to := "its recipients are not recorded"
		if len(wantRecipients) > 0 {
			to = "it is encrypted to " + strings.Join(wantRecipients, ", ")
		}
		return fmt.Errorf("%w: no identity mounted (no --identity-file, or an empty one); %s", ErrNoIdentity, to)
	}
	t := &srcTracker{r: &limitedHeader{r: src, left: HeaderReadLimit}}
	br := bufio.NewReader(t)
	if ok, err := Sniff(br); err != nil && t.err != nil {
		return fmt.Errorf("reading the age header: %w", t.err)
	} else if !ok {
		// Not age at all (a plaintext object under an .age name): say so
		// without reading up to the limit for age's first line.
		return &TamperError{Part: "header", Detail: "the object does not start with an age header (" + ageIntro[:len(ageIntro)-1] + ")"}
	}
	hdr, err := age.ExtractHeader(br)
	if err != nil {
		if t.err == nil {
			if lh := t.r.(*limitedHeader); lh.hit {
				return &TamperError{Part: "header", Detail: fmt.Sprintf("no end of the age header in the first %d bytes", HeaderReadLimit)}
			}
		}
		return classifyHeader(err, t, ids, wantRecipients)
	}
	if _, err := age.DecryptHeader(hdr, ids.ageIdentities()...); err != nil {
		cerr := classifyHeader(err, t, ids, wantRecipients)
		var nm *age.NoIdentityMatchError
		if errors.As(err, &nm) && errors.Is(cerr, ErrNoIdentity) {
			return fmt.Errorf("%w (the object's age header holds %s)", cerr, stanzaCount(nm.StanzaTypes))
		}
		return cerr
	}
	return nil
}

// stanzaCount is "1 recipient stanza (X25519)" or "3 recipient stanzas
// (X25519, X25519, scrypt)".
func stanzaCount(types []string) string {
	s := fmt.Sprintf("%d recipient stanzas", len(types))
	if len(types) == 1 {
		s = "1 recipient stanza"
	}
	if len(types) > 0 {
		s += " (" + strings.Join(types, ", ") + ")"
	}
	return s
}

// limitedHeader is io.LimitReader that remembers whether the limit, not
// the source, ended the stream.
type limitedHeader struct {
	r    io.Reader
	left int64
	hit  bool
}

func (l *limitedHeader) Read(p []byte) (int, error) {
	if l.left <= 0 {
		l.hit = true
		return 0, io.EOF
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}
