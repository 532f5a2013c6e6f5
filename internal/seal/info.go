package seal

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
)

// Suffix is appended to the key of every encrypted object
// (snapshot.db.zst.age, v2.jsonl.zst.age).
const Suffix = ".age"

// Format is the Info.Format of an age-encrypted backup.
const Format = "age"

// Info describes a backup's encryption for its manifest. The manifest stays
// readable without any secret: it holds the recipients' public keys only.
// A nil *Info (or an empty Format) means the backup is not encrypted.
type Info struct {
	// Format is "age".
	Format string `json:"format"`
	// Recipients are the canonical age X25519 public keys (age1…), sorted.
	Recipients []string `json:"recipients"`
}

// NewInfo is the manifest entry for objects encrypted to rs; nil when rs is
// empty (no encryption).
func NewInfo(rs Recipients) *Info {
	if rs.Len() == 0 {
		return nil
	}
	return &Info{Format: Format, Recipients: rs.Strings()}
}

// Encrypted reports whether i describes an encrypted backup.
func (i *Info) Encrypted() bool { return i != nil && i.Format != "" }

// Validate checks an Info read from a manifest: a known format and at
// least one well-formed recipient.
func (i *Info) Validate() error {
	if i == nil {
		return nil
	}
	if i.Format != Format {
		return errors.New("encryption format " + quote(i.Format) + " is not supported (only \"age\")")
	}
	if len(i.Recipients) == 0 {
		return errors.New("encryption \"age\" without recipients")
	}
	for _, r := range i.Recipients {
		if _, err := ParseRecipient(r); err != nil {
			return err
		}
	}
	return nil
}

// ObjectKey is the key an object gets when it is encrypted.
func ObjectKey(key string) string { return key + Suffix }

// IsSealedKey reports whether key names an encrypted object.
func IsSealedKey(key string) bool { return strings.HasSuffix(key, Suffix) }

// PlainKey is key without the encryption suffix.
func PlainKey(key string) string { return strings.TrimSuffix(key, Suffix) }

// ageIntro is the first line of every binary age file.
const ageIntro = "age-encryption.org/v1\n"

// Sniff reports whether the stream starts with an age header, without
// consuming anything from r.
func Sniff(r *bufio.Reader) (bool, error) {
	b, err := r.Peek(len(ageIntro))
	if err != nil && err != io.EOF && err != bufio.ErrBufferFull {
		return false, err
	}
	return bytes.Equal(b, []byte(ageIntro)), nil
}

func quote(s string) string {
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return "\"" + s + "\""
}
