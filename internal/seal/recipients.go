package seal

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"unicode/utf8"

	"filippo.io/age"
)

// Environment variables read by [RecipientsFromEnv] (and, when wired, by
// the flags of the same meaning).
const (
	// EnvEncryptTo holds recipients (age1…), separated by commas or
	// whitespace: --encrypt-to.
	EnvEncryptTo = "ETCD_RECOVERY_ENCRYPT_TO"
	// EnvRecipientsFile is the path of a recipients file: --recipients-file.
	EnvRecipientsFile = "ETCD_RECOVERY_RECIPIENTS_FILE"
	// EnvIdentityFile is the path of an identity file: --identity-file.
	EnvIdentityFile = "ETCD_RECOVERY_IDENTITY_FILE"
	// EnvRequireEncryption ("true") makes a backup without recipients a
	// configuration error: --require-encryption.
	EnvRequireEncryption = "ETCD_RECOVERY_REQUIRE_ENCRYPTION"
)

// ErrNoRecipients is returned by [Encrypt] without recipients, and by
// [CheckRequired] when encryption is required but none is configured.
var ErrNoRecipients = errors.New("no age recipients configured")

// maxRecipientsFile bounds a recipients file: a few hundred keys at most.
const maxRecipientsFile = 1 << 20

// Recipients is a de-duplicated set of age X25519 recipients, sorted by
// their canonical public-key string. The zero value is the empty set.
type Recipients struct {
	list []*age.X25519Recipient
	strs []string
}

// Len is the number of recipients.
func (r Recipients) Len() int { return len(r.list) }

// Strings are the canonical public keys (lower-case age1…), sorted: the
// manifest's recipients.
func (r Recipients) Strings() []string { return slices.Clone(r.strs) }

// String is the comma-separated public keys, for logs and errors.
func (r Recipients) String() string { return strings.Join(r.strs, ",") }

func (r Recipients) ageRecipients() []age.Recipient {
	out := make([]age.Recipient, len(r.list))
	for i, x := range r.list {
		out[i] = x
	}
	return out
}

// MergeRecipients is the union of sets, de-duplicated and sorted.
func MergeRecipients(sets ...Recipients) Recipients {
	var all []*age.X25519Recipient
	for _, s := range sets {
		all = append(all, s.list...)
	}
	return newRecipients(all)
}

func newRecipients(list []*age.X25519Recipient) Recipients {
	byKey := make(map[string]*age.X25519Recipient, len(list))
	for _, r := range list {
		byKey[r.String()] = r
	}
	var out Recipients
	for k := range byKey {
		out.strs = append(out.strs, k)
	}
	slices.Sort(out.strs)
	for _, k := range out.strs {
		out.list = append(out.list, byKey[k])
	}
	return out
}

// ParseRecipient parses one age X25519 recipient (age1…). Other kinds are
// refused with the reason: post-quantum hybrid (age1pq1…), plugin
// (age1yubikey1…, …), SSH keys, and secret keys given by mistake (never
// echoed).
func ParseRecipient(s string) (*age.X25519Recipient, error) {
	s = strings.TrimSpace(s)
	if s == strings.ToUpper(s) {
		s = strings.ToLower(s) // bech32 allows all upper case; age does not
	}
	switch {
	case s == "":
		return nil, errors.New("empty age recipient")
	case strings.HasPrefix(s, "age-secret-key-"), strings.HasPrefix(strings.ToUpper(s), "AGE-SECRET-KEY-"):
		return nil, errors.New("an age secret key (identity) where a recipient belongs: give its public key (age-keygen -y), and keep the secret key out of this configuration (value not shown)")
	case strings.HasPrefix(s, "age1pq1"):
		return nil, fmt.Errorf("age recipient %s: post-quantum (hybrid) recipients are not supported, only X25519 (age1…)", abbrev(s))
	case strings.HasPrefix(s, "ssh-"), strings.HasPrefix(s, "ecdsa-sha2-"), strings.HasPrefix(s, "sk-"):
		return nil, fmt.Errorf("%s: SSH keys are not supported as recipients, only age X25519 recipients (age1…, from age-keygen)", abbrev(s))
	case !strings.HasPrefix(s, "age1"):
		return nil, fmt.Errorf("%s is not an age X25519 recipient (age1…)", abbrev(s))
	}
	if i := strings.LastIndexByte(s, '1'); i > 3 { // bech32 data has no '1': the last one ends the type
		return nil, fmt.Errorf("age recipient %s: plugin recipients (age1%s1…) are not supported, only X25519 (age1…)", abbrev(s), s[4:i])
	}
	r, err := age.ParseX25519Recipient(s)
	if err != nil {
		// age's message quotes the (public) value; keep only its reason.
		reason := err.Error()
		if i := strings.LastIndex(reason, ": "); i >= 0 {
			reason = reason[i+2:]
		}
		return nil, fmt.Errorf("malformed age recipient %s: %s", abbrev(s), reason)
	}
	return r, nil
}

// abbrev shortens a public value for an error message.
func abbrev(s string) string {
	if !utf8.ValidString(s) {
		return "(invalid UTF-8)"
	}
	if len(s) > 72 {
		return fmt.Sprintf("%q…", s[:72])
	}
	return fmt.Sprintf("%q", s)
}

// ParseRecipients parses --encrypt-to values (or EnvEncryptTo); each value
// may hold several recipients separated by commas or whitespace.
func ParseRecipients(values []string) (Recipients, error) {
	var list []*age.X25519Recipient
	for _, v := range values {
		for _, f := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' || r == '\r' }) {
			r, err := ParseRecipient(f)
			if err != nil {
				return Recipients{}, err
			}
			list = append(list, r)
		}
	}
	return newRecipients(list), nil
}

// ParseRecipientsFile parses a recipients file in age's format: one X25519
// recipient per line, blank lines and lines starting with '#' ignored
// (surrounding whitespace and CRLF line ends are tolerated). Errors name
// the file and the line; a file without any recipient is an error, so a
// misconfigured job fails instead of writing plaintext.
func ParseRecipientsFile(r io.Reader, name string) (Recipients, error) {
	var list []*age.X25519Recipient
	err := keyLines(r, "recipients file "+name, maxRecipientsFile, func(line string) error {
		rec, err := ParseRecipient(line)
		if err == nil {
			list = append(list, rec)
		}
		return err
	})
	if err != nil {
		return Recipients{}, err
	}
	if len(list) == 0 {
		return Recipients{}, fmt.Errorf("recipients file %s: no recipients in it (only comments or blank lines)", name)
	}
	return newRecipients(list), nil
}

// keyLines calls each for every line of a key file (age's format: blank
// lines and '#' comments skipped, surrounding space trimmed), reading at
// most limit bytes. Errors name what (the file) and the line number; each's
// errors are wrapped as they are, so they must not quote secret content.
func keyLines(r io.Reader, what string, limit int64, each func(line string) error) error {
	lr := &io.LimitedReader{R: r, N: limit + 1}
	sc := bufio.NewScanner(lr)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := each(line); err != nil {
			return fmt.Errorf("%s, line %d: %w", what, n, err)
		}
	}
	if err := sc.Err(); err != nil {
		// bufio's errors (line too long) carry no content.
		return fmt.Errorf("%s, line %d: %w", what, n+1, err)
	}
	if lr.N == 0 {
		return fmt.Errorf("%s: larger than %d bytes", what, limit)
	}
	return nil
}

// ReadRecipientsFile reads and parses a recipients file.
func ReadRecipientsFile(path string) (Recipients, error) {
	f, err := os.Open(path)
	if err != nil {
		return Recipients{}, fmt.Errorf("recipients file: %w", err)
	}
	defer f.Close()
	return ParseRecipientsFile(f, path)
}

// LoadRecipients merges --encrypt-to values and --recipients-file files.
func LoadRecipients(encryptTo []string, files []string) (Recipients, error) {
	sets := make([]Recipients, 0, len(files)+1)
	rs, err := ParseRecipients(encryptTo)
	if err != nil {
		return Recipients{}, err
	}
	sets = append(sets, rs)
	for _, f := range files {
		if strings.TrimSpace(f) == "" {
			continue
		}
		rs, err := ReadRecipientsFile(f)
		if err != nil {
			return Recipients{}, err
		}
		sets = append(sets, rs)
	}
	return MergeRecipients(sets...), nil
}

// RecipientsFromEnv reads EnvEncryptTo and EnvRecipientsFile through
// lookup (os.LookupEnv, or a test's map) and merges them.
func RecipientsFromEnv(lookup func(string) (string, bool)) (Recipients, error) {
	var values, files []string
	if v, ok := lookup(EnvEncryptTo); ok {
		values = append(values, v)
	}
	if f, ok := lookup(EnvRecipientsFile); ok {
		files = append(files, f)
	}
	rs, err := LoadRecipients(values, files)
	if err != nil {
		return Recipients{}, fmt.Errorf("from the environment (%s, %s): %w", EnvEncryptTo, EnvRecipientsFile, err)
	}
	return rs, nil
}

// CheckRequired fails when encryption is required (--require-encryption)
// and no recipient is configured: the job must not write plaintext.
func CheckRequired(rs Recipients, required bool) error {
	if required && rs.Len() == 0 {
		return fmt.Errorf("%w, but encryption is required (--require-encryption): set --encrypt-to or --recipients-file (%s, %s)", ErrNoRecipients, EnvEncryptTo, EnvRecipientsFile)
	}
	return nil
}
