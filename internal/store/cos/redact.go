package cos

import (
	"regexp"
	"strings"
)

// Redacted replaces a credential in error text.
const Redacted = "[REDACTED]"

var (
	// key=value, "key":"value", key: value for credential-like keys.
	credKV = regexp.MustCompile(`(?i)((?:ibm_)?api[_-]?key(?:[_-]?id)?|apikey|(?:aws_)?secret[_-]?access[_-]?key|(?:aws_)?access[_-]?key[_-]?id|secret|client[_-]?secret|password|passwd|(?:access|refresh|id|session|delegated_refresh)[_-]?token|token|x-amz-security-token|x-amz-credential|credential)(\\?["']?\s*[:=]\s*\\?["']?)([^"'\\&\s,;{}\[\]]+)`)
	// Authorization headers: the scheme may stay, the credentials go.
	authHeader = regexp.MustCompile(`(?i)(authorization\\?["']?\s*[:=]\s*\\?["']?)(?:(bearer|basic|aws4-hmac-sha256|aws)\s+)?[^"'\\\n]+`)
	// A bare scheme + token anywhere.
	bearer = regexp.MustCompile(`(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}`)
	// AWS-style access key ids (AKIA..., ASIA...).
	awsKeyID = regexp.MustCompile(`\b(?:AKIA|ASIA)[A-Z0-9]{12,}\b`)
)

// Redact removes anything that looks like a credential from text taken
// from an outside service (an error body, an SDK error): API keys,
// secrets, tokens and passwords given as key=value or JSON, Authorization
// headers, bearer/basic credentials and AWS access key ids.
func Redact(s string) string {
	s = authHeader.ReplaceAllStringFunc(s, func(m string) string {
		sub := authHeader.FindStringSubmatch(m)
		out := sub[1]
		if sub[2] != "" {
			out += sub[2] + " "
		}
		return out + Redacted
	})
	s = credKV.ReplaceAllString(s, "${1}${2}"+Redacted)
	s = bearer.ReplaceAllString(s, "${1} "+Redacted)
	s = awsKeyID.ReplaceAllString(s, Redacted)
	return s
}

// secretRedactor returns a func that removes the credential values
// themselves (and their URL- and JSON-escaped forms) from text, whatever
// surrounds them.
func secretRedactor(c Credentials) func(string) string {
	var secrets []string
	for _, v := range []string{c.APIKey, c.SecretAccessKey, c.AccessKeyID} {
		if len(v) < 4 { // too short to be a real secret; replacing it would mangle text
			continue
		}
		secrets = append(secrets, v)
		if q := queryEscape(v); q != v {
			secrets = append(secrets, q)
		}
	}
	return func(s string) string {
		for _, v := range secrets {
			s = strings.ReplaceAll(s, v, Redacted)
		}
		return s
	}
}

// queryEscape is url.QueryEscape without importing net/url for one call.
func queryEscape(v string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.', c == '~':
			b.WriteByte(c)
		case c == ' ':
			b.WriteByte('+')
		default:
			b.WriteString("%" + strings.ToUpper(string("0123456789abcdef"[c>>4])+string("0123456789abcdef"[c&15])))
		}
	}
	return b.String()
}
