package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/store/memstore"
)

// The memstore backend is linked into this test (memstore.Kind); the
// scheme of an unlinked backend is unknown here.
func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want store.Config
	}{
		{"mem://", store.Config{Kind: memstore.Kind}},
		{"mem://b", store.Config{Kind: memstore.Kind, Bucket: "b"}},
		{"mem://b/", store.Config{Kind: memstore.Kind, Bucket: "b"}},
		{"mem://b/etcd/prod", store.Config{Kind: memstore.Kind, Bucket: "b", Prefix: "etcd/prod"}},
		{"MEM://b/p/", store.Config{Kind: memstore.Kind, Bucket: "b", Prefix: "p/"}},
		{"mem://backups.example/p?endpoint=https%3A%2F%2Fs3.example%3A9000&region=eu-de",
			store.Config{Kind: memstore.Kind, Bucket: "backups.example", Prefix: "p", Endpoint: "https://s3.example:9000", Region: "eu-de"}},
		// The endpoint may be written unescaped: a query value can hold
		// "://" and ":".
		{"mem://b?endpoint=https://s3.example:9000&ca-file=/etc/ssl/ca.pem&region=us-standard",
			store.Config{Kind: memstore.Kind, Bucket: "b", Endpoint: "https://s3.example:9000", Region: "us-standard", CAFile: "/etc/ssl/ca.pem"}},
	} {
		got, err := store.ParseURL(tc.raw)
		if err != nil {
			t.Errorf("ParseURL(%q): %v", tc.raw, err)
			continue
		}
		if got.Kind != tc.want.Kind || got.Bucket != tc.want.Bucket || got.Prefix != tc.want.Prefix || got.Endpoint != tc.want.Endpoint ||
			got.Region != tc.want.Region || got.CAFile != tc.want.CAFile {
			t.Errorf("ParseURL(%q) = %+v, want %+v", tc.raw, got, tc.want)
		}
	}
}

// Config.URL is ParseURL's inverse for every location field.
func TestURLRoundTrip(t *testing.T) {
	for _, cfg := range []store.Config{
		{Kind: memstore.Kind},
		{Kind: memstore.Kind, Bucket: "b"},
		{Kind: memstore.Kind, Bucket: "my.bucket-1", Prefix: "etcd/prod"},
		{Kind: memstore.Kind, Bucket: "b", Prefix: "with space/and+plus&amp", Endpoint: "http://127.0.0.1:9000", Region: "us-east-1",
			CAFile: "/tmp/a b/ca.pem"},
		{Kind: memstore.Kind, Bucket: "b", Endpoint: "https://s3.eu-de.cloud-object-storage.appdomain.cloud"},
	} {
		raw := cfg.URL()
		got, err := store.ParseURL(raw)
		if err != nil {
			t.Errorf("ParseURL(%q) of %+v: %v", raw, cfg, err)
			continue
		}
		if got.Kind != cfg.Kind || got.Bucket != cfg.Bucket || got.Prefix != cfg.Prefix || got.Endpoint != cfg.Endpoint ||
			got.Region != cfg.Region || got.CAFile != cfg.CAFile {
			t.Errorf("%+v → %q → %+v", cfg, raw, got)
		}
	}
	// Nothing but the location is written.
	cfg := store.Config{Kind: memstore.Kind, Bucket: "b", CredentialsDir: "/secret/dir", MaxRetries: 3, MinThroughput: "off",
		Getenv: func(string) string { return "SECRET" }}
	if raw := cfg.URL(); raw != "mem://b" {
		t.Errorf("URL of a Config with settings: %q, want mem://b", raw)
	}
}

func TestParseURLErrors(t *testing.T) {
	const secret = "s3cr3tValue"
	for _, tc := range []struct {
		raw, want string
		creds     bool // a credential: ErrCredentialsInURL, the secret not repeated
	}{
		{"", "empty", false},
		{"   ", "empty", false},
		{"b/prefix", "want <scheme>://<bucket>", false},
		{"nope://b/p", `unknown scheme "nope" (known: `, false},
		{"mem:b", "want <scheme>://<bucket>", false},
		{"mem://b:9000/p", "it has no port", false},
		{"mem://b/p#frag", "a fragment is not allowed", false},
		{"mem://b?endpoint=a&endpoint=b", `parameter "endpoint" given 2 times`, false},
		{"mem://b?lock-mode=governance", `unknown parameter "lock-mode" (known: ca-file, endpoint, region)`, false},
		{"mem://b?region=%zz", "bad query", false},
		{"mem://AKIAEXAMPLE:" + secret + "@b/p", "user info: credentials never go in a store URL", true},
		{"mem://" + secret + "@b/p", "user info: credentials never go in a store URL", true},
		{"mem://b/p?secret_access_key=" + secret, `parameter "secret_access_key": credentials never go in a store URL`, true},
		{"mem://b/p?access_key_id=AK&region=r", `parameter "access_key_id": credentials`, true},
		{"mem://b/p?apikey=" + secret, `parameter "apikey": credentials`, true},
		{"mem://b/p?X-Amz-Signature=" + secret + "&X-Amz-Credential=x", `parameter "X-Amz-Credential": credentials`, true},
		{"mem://b/p?session_token=" + secret, `parameter "session_token": credentials`, true},
		{"mem://b/p?password=" + secret, `parameter "password": credentials`, true},
		// An '@' before the query is user info however it parses: a
		// secret with a '/' (half of them) or digits after the ':' does
		// not slip out through a parse error or the port check.
		{"mem://user:" + secret + "@b/%zz", "user info", true},
		{"mem://AKIA:wJalr/" + secret + "@b/p", "user info", true},
		{"mem://AKIA:1234/" + secret + "@b/p", "user info", true},
		{"mem://AKIA:wJal@r/" + secret + "@b/p", "user info", true},
		// Values of unknown parameters are not shown, whatever their name.
		{"mem://b/p?sig=" + secret, `unknown parameter "sig"`, false},
		{"mem://b/p?sk=" + secret, `unknown parameter "sk"`, false},
		{"mem://b:1/p?region=r&sk=" + secret, "it has no port", false},
		// An endpoint with user info is a credential too, and a later
		// error does not show it.
		{"mem://b:1/p?endpoint=https://AK:" + secret + "@h", "it has no port", false},
		{"mem://b:1/p?endpoint=https://h&x=" + secret, "it has no port", false},
		// A query that does not parse: the reason, not the input.
		{"mem://b/p?x=%zz" + secret, "bad query (want name=value", false},
		{"mem://b/p?a=1;b=" + secret, "bad query (want name=value", false},
	} {
		_, err := store.ParseURL(tc.raw)
		if err == nil {
			t.Errorf("ParseURL(%q) succeeded", tc.raw)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseURL(%q): %v; want %q in it", tc.raw, err, tc.want)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("ParseURL(%q): %v: the error repeats the secret", tc.raw, err)
		}
		if tc.creds != errors.Is(err, store.ErrCredentialsInURL) {
			t.Errorf("ParseURL(%q): %v: errors.Is ErrCredentialsInURL = %v, want %v", tc.raw, err, !tc.creds, tc.creds)
		}
	}
}

func TestRedactURL(t *testing.T) {
	for raw, want := range map[string]string{
		"cos://b/p?endpoint=https%3A%2F%2Fh":      "cos://b/p?endpoint=https%3A%2F%2Fh",
		"cos://ak:sk@b/p":                         "cos://REDACTED@b/p",
		"cos://b/p?secret_access_key=sk&region=r": "cos://b/p?region=r&secret_access_key=REDACTED",
		"cos://ak:sk@b/%zz":                       "cos://…",
		"cos://b/%zz?token=x":                     "cos://…",
		"ak:sk@b/%zz":                             "ak:…",
	} {
		if got := store.RedactURL(raw); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", raw, got, want)
		}
	}
}

// OpenURL opens the backend of the scheme with the URL's location and the
// settings' credentials; settings that name a location are refused.
func TestOpenURL(t *testing.T) {
	ctx := context.Background()
	a, err := store.OpenURL(ctx, "mem://url-test/p", store.Config{MaxRetries: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Put(ctx, "k", strings.NewReader("v")); err != nil {
		t.Fatal(err)
	}
	// The same bucket through Open: one store.
	b, err := store.Open(ctx, store.Config{Kind: memstore.Kind, Bucket: "url-test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(ctx, "k"); err != nil {
		t.Errorf("the bucket opened by URL and by Config differ: %v", err)
	}
	if _, err := store.OpenURL(ctx, "mem://url-test", store.Config{Bucket: "other"}); err == nil || !strings.Contains(err.Error(), "the URL holds it") {
		t.Errorf("OpenURL with a bucket in the settings: %v", err)
	}
	if _, err := store.OpenURL(ctx, "nope://b", store.Config{}); err == nil || !strings.Contains(err.Error(), `unknown scheme "nope"`) {
		t.Errorf("OpenURL of an unknown scheme: %v", err)
	}
}
