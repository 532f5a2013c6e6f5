package seal

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"filippo.io/age"
)

// maxIdentityFile bounds an identity file.
const maxIdentityFile = 64 << 10

// Identities are age X25519 identities (secret keys) loaded from a file.
// Printing them (%v, %s, %#v, logs) shows their public keys only.
type Identities struct {
	ids    []*age.X25519Identity
	pubs   []string // canonical recipients of ids, in file order
	source string
	// Warning is set when the file was accepted with a remark (group
	// permissions), for the caller to log; empty otherwise.
	Warning string
}

// Len is the number of identities.
func (i *Identities) Len() int {
	if i == nil {
		return 0
	}
	return len(i.ids)
}

// Recipients are the public keys of the identities, in file order.
func (i *Identities) Recipients() []string {
	if i == nil {
		return nil
	}
	return slices.Clone(i.pubs)
}

// String names the identities by their public keys and source, never by
// their secret keys.
func (i *Identities) String() string {
	if i == nil {
		return "no age identities"
	}
	return fmt.Sprintf("%d age identities from %s (public keys %s)", len(i.ids), i.source, strings.Join(i.pubs, ","))
}

// GoString keeps %#v from dumping the secret keys.
func (i *Identities) GoString() string { return i.String() }

// Format keeps every fmt verb from dumping the secret keys.
func (i *Identities) Format(f fmt.State, _ rune) { io.WriteString(f, i.String()) }

func (i *Identities) ageIdentities() []age.Identity {
	out := make([]age.Identity, len(i.ids))
	for k, x := range i.ids {
		out[k] = x
	}
	return out
}

// ReadIdentityFile loads an age identity file (AGE-SECRET-KEY-1… lines,
// '#' comments and blank lines allowed, as age-keygen writes it). A file
// that others may access (mode & 0o007) is refused; group permission is
// accepted with a Warning (the kubelet makes a Secret mounted with
// defaultMode 0400 into a pod with an fsGroup 0440). Errors name the file
// and line, never its content.
func ReadIdentityFile(path string) (*Identities, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("identity file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("identity file: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("identity file %s: not a regular file", path)
	}
	perm := st.Mode().Perm()
	if perm&0o007 != 0 {
		return nil, fmt.Errorf("identity file %s: mode %04o lets other users access the secret key: chmod 0400 (0440 with a group), or mount the Secret with defaultMode: 0400", path, perm)
	}
	ids, err := ParseIdentities(f, path)
	if err != nil {
		return nil, err
	}
	if perm&0o070 != 0 {
		ids.Warning = fmt.Sprintf("identity file %s has mode %04o: its group can read the secret key (expected with a Secret volume and an fsGroup; otherwise chmod 0400)", path, perm)
	}
	return ids, nil
}

// ParseIdentities parses identity file content; name is used in errors.
func ParseIdentities(r io.Reader, name string) (*Identities, error) {
	out := &Identities{source: name}
	seen := map[string]bool{}
	err := keyLines(r, "identity file "+name, maxIdentityFile, func(line string) error {
		id, err := parseIdentityLine(line)
		if err != nil {
			return fmt.Errorf("%w (content not shown)", err)
		}
		if pub := id.Recipient().String(); !seen[pub] {
			seen[pub] = true
			out.ids = append(out.ids, id)
			out.pubs = append(out.pubs, pub)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out.ids) == 0 {
		return nil, fmt.Errorf("identity file %s: no identities in it (only comments or blank lines)", name)
	}
	return out, nil
}

// parseIdentityLine parses one line; its errors never include the line or
// age's error text (which may quote parts of it).
func parseIdentityLine(line string) (*age.X25519Identity, error) {
	up := strings.ToUpper(line)
	switch {
	case strings.HasPrefix(up, "AGE-SECRET-KEY-PQ-1"):
		return nil, errors.New("a post-quantum (hybrid) identity: only X25519 identities (AGE-SECRET-KEY-1…) are supported")
	case strings.HasPrefix(up, "AGE-PLUGIN-"):
		return nil, errors.New("a plugin identity: only X25519 identities (AGE-SECRET-KEY-1…) are supported")
	case strings.HasPrefix(up, "AGE-SECRET-KEY-1"):
		if line == strings.ToLower(line) {
			line = up // bech32 allows all lower case; age wants upper
		}
		id, err := age.ParseX25519Identity(line)
		if err != nil {
			return nil, errors.New("a malformed age secret key (bad length, character or checksum)")
		}
		return id, nil
	case strings.HasPrefix(line, "age1"):
		return nil, errors.New("a recipient (public key) where an identity (AGE-SECRET-KEY-1…) belongs")
	case strings.HasPrefix(line, "-----BEGIN"), strings.HasPrefix(line, "ssh-"):
		return nil, errors.New("an SSH or PEM key: only age X25519 identities (AGE-SECRET-KEY-1…) are supported")
	}
	return nil, errors.New("not an age identity (AGE-SECRET-KEY-1…)")
}
