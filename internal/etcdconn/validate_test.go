package etcdconn

import (
	"strings"
	"testing"
)

func TestValidateEndpoint(t *testing.T) {
	t.Parallel()
	good := []string{
		"http://127.0.0.1:2379", "https://127.0.0.1:2379", "https://10.0.0.1:2379/",
		"https://etcd-0.etcd.kubx-etcd-07.svc:2379", "https://[::1]:2379", "127.0.0.1:2379", "localhost:2379",
	}
	for _, ep := range good {
		if err := ValidateEndpoint(ep); err != nil {
			t.Errorf("ValidateEndpoint(%q) = %v, want nil", ep, err)
		}
	}
	bad := map[string]string{
		"":                                 "empty",
		"foo://127.0.0.1:2379":             `unknown scheme "foo"`,
		"HTTPS://127.0.0.1:2379":           `unknown scheme "HTTPS"`,
		"unix://x:1":                       `unknown scheme "unix"`,
		"https://127.0.0.1":                "no host:port",
		"https://:2379":                    "no host",
		"https://127.0.0.1:notaport":       "not a URL",
		"https://127.0.0.1:0":              `invalid port "0"`,
		"https://127.0.0.1:70000":          `invalid port "70000"`,
		"https://127.0.0.1:2379/v3":        "a path",
		"https://u:p@127.0.0.1:2379":       "user info",
		"https://127.0.0.1:2379?x=1":       "query",
		"http://[::1:2379":                 "not a URL",
		"https//127.0.0.1:2379":            "not a URL",
		" https://127.0.0.1:2379":          "space",
		"127.0.0.1":                        "no host:port",
		"https://127.0.0.1:2379,127.0.0.2": "not a URL",
		"127.0.0.1:notaport":               `invalid port "notaport"`,
	}
	for ep, want := range bad {
		err := ValidateEndpoint(ep)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "--endpoints") {
			t.Errorf("ValidateEndpoint(%q) = %v, want an error naming --endpoints and %q", ep, err, want)
		}
	}
}

// A value named in an error never carries a password.
func TestValidateEndpointRedactsUserInfo(t *testing.T) {
	t.Parallel()
	for _, ep := range []string{"https://root:s3cret-pw@127.0.0.1:2379", "root:s3cret-pw@127.0.0.1:2379", "foo://root:s3cret-pw@h:1/p@x"} {
		err := ValidateEndpoint(ep)
		if err == nil || strings.Contains(err.Error(), "s3cret-pw") || !strings.Contains(err.Error(), "REDACTED@") {
			t.Errorf("ValidateEndpoint(%q) = %v: want an error without the password", ep, err)
		}
	}
}
