package cos_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/store/cos"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

// Distinctive secret values: no error and no formatting of the credentials
// may ever contain one of them.
const (
	tSecret  = "hmacSECRET-4f0c9a1e7d"
	tSecret2 = "otherProfileSECRET-88a1"
	tAPIKey  = "iamAPIKEY-b2d6e0f3c5"
	tAPIKey2 = "jsonAPIKEY-17c0de4b99"
)

var allSecrets = []string{tSecret, tSecret2, tAPIKey, tAPIKey2}

// noSecrets fails when any formatting of c, or err, shows a secret.
func noSecrets(tb testing.TB, c cos.Credentials, err error) {
	tb.Helper()
	out := fmt.Sprintf("%v %+v %#v %s %q %x", c, c, c, c, c, c)
	out += fmt.Sprintf("%v %+v %#v %s", &c, &c, &c, &c)
	out += fmt.Sprintf("%v %+v %#v", []cos.Credentials{c}, struct{ C cos.Credentials }{c}, map[string]cos.Credentials{"c": c})
	if err != nil {
		out += fmt.Sprintf("%v %+v %#v %s", err, err, err, err)
	}
	for _, s := range allSecrets {
		if strings.Contains(out, s) {
			tb.Fatalf("a secret shows: %s", out)
		}
	}
}

func envMap(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

// secretDir writes files (name -> content) into a new directory.
func secretDir(tb testing.TB, files map[string]string) string {
	tb.Helper()
	dir := tb.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	return dir
}

// loadCredentials loads credentials from dir and the environment env (name,
// value pairs), never showing a secret. With wantErr it expects the load to
// fail with an error naming each of wantErr and returns false; without, it
// expects the load to succeed.
func loadCredentials(tb testing.TB, dir string, env, wantErr []string) (cos.Credentials, bool) {
	tb.Helper()
	c, err := cos.LoadCredentials(dir, envMap(env...))
	noSecrets(tb, c, err)
	if len(wantErr) > 0 {
		if err == nil {
			tb.Fatalf("LoadCredentials succeeded: %v", c)
		}
		for _, w := range wantErr {
			if !strings.Contains(err.Error(), w) {
				tb.Errorf("error %q does not mention %q", err, w)
			}
		}
		return c, false
	}
	if err != nil {
		tb.Fatalf("LoadCredentials: %v", err)
	}
	return c, true
}

func TestLoadCredentialsEnv(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		env     []string
		want    cos.Credentials // compared without Source when wantErr is empty
		wantErr []string        // substrings of the error
	}{
		{
			name: "hmac",
			env:  []string{cos.EnvAccessKeyID, "AKID1", cos.EnvSecretAccessKey, tSecret},
			want: cos.Credentials{AccessKeyID: "AKID1", SecretAccessKey: tSecret},
		},
		{
			name: "iam",
			env: []string{cos.EnvAPIKey, tAPIKey, cos.EnvServiceInstanceID, "crn:v1:bluemix:public:cloud-object-storage:global:a/1::",
				cos.EnvAuthEndpoint, "https://iam.example/identity/token"},
			want: cos.Credentials{APIKey: tAPIKey, ServiceInstanceID: "crn:v1:bluemix:public:cloud-object-storage:global:a/1::",
				AuthEndpoint: "https://iam.example/identity/token"},
		},
		{
			name:    "both",
			env:     []string{cos.EnvAccessKeyID, "AKID1", cos.EnvSecretAccessKey, tSecret, cos.EnvAPIKey, tAPIKey},
			wantErr: []string{"cos:", cos.EnvAccessKeyID, cos.EnvAPIKey, "only one"},
		},
		{
			name:    "none",
			env:     []string{"UNRELATED", "x"},
			wantErr: []string{"cos: no credentials", cos.EnvAccessKeyID, cos.EnvSecretAccessKey, cos.EnvAPIKey},
		},
		{
			name:    "id-only",
			env:     []string{cos.EnvAccessKeyID, "AKID1"},
			wantErr: []string{"incomplete HMAC credentials", "environment"},
		},
		{
			name:    "secret-only",
			env:     []string{cos.EnvSecretAccessKey, tSecret},
			wantErr: []string{"incomplete HMAC credentials"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, ok := loadCredentials(t, "", tc.env, tc.wantErr)
			if !ok {
				return
			}
			if c.Source != "environment" {
				t.Errorf("Source = %q", c.Source)
			}
			got := c
			got.Source = ""
			if got != tc.want {
				t.Errorf("got %#v, want %#v", got, tc.want) // %#v is redacted: compare fields below
				t.Errorf("kinds %s/%s; instance %q/%q; endpoint %q/%q", got.Kind(), tc.want.Kind(),
					got.ServiceInstanceID, tc.want.ServiceInstanceID, got.AuthEndpoint, tc.want.AuthEndpoint)
			}
			if c.Kind() != tc.want.Kind() {
				t.Errorf("Kind = %q, want %q", c.Kind(), tc.want.Kind())
			}
		})
	}
}

func TestLoadCredentialsDir(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		files   map[string]string
		env     []string
		kind    string
		id      string // AccessKeyID for hmac
		secret  string // SecretAccessKey for hmac, APIKey for iam
		inst    string // ServiceInstanceID for iam
		authEP  string
		wantErr []string
	}{
		{
			name:   "key-files",
			files:  map[string]string{"access_key_id": "AKID2\n", "secret_access_key": tSecret + "\n"},
			env:    []string{cos.EnvAPIKey, tAPIKey}, // the directory wins over the environment
			kind:   "hmac",
			id:     "AKID2",
			secret: tSecret,
		},
		{
			name: "aws-ini-etcd-operator",
			files: map[string]string{
				"credentials": "# written by the operator\n[other]\naws_access_key_id = OTHER\naws_secret_access_key = " + tSecret2 + "\n\n" +
					"[default]\naws_access_key_id = AKID3\naws_secret_access_key=" + tSecret + "\n",
				"config": "[default]\nregion = us-south\n",
			},
			kind:   "hmac",
			id:     "AKID3",
			secret: tSecret,
		},
		{
			name: "aws-ini-no-section",
			files: map[string]string{
				"credentials": "aws_access_key_id=AKID4\naws_secret_access_key=" + tSecret + "\n",
			},
			kind:   "hmac",
			id:     "AKID4",
			secret: tSecret,
		},
		{
			name: "ibm-ini-apikey",
			files: map[string]string{
				"credentials": "[default]\nibm_api_key_id = " + tAPIKey + "\nibm_service_instance_id = inst-1\nibm_auth_endpoint = https://iam.example/token\n",
			},
			kind:   "iam",
			secret: tAPIKey,
			inst:   "inst-1",
			authEP: "https://iam.example/token",
		},
		{
			name: "service-credential-json-hmac",
			files: map[string]string{"credentials": `{
  "apikey": "` + tAPIKey2 + `",
  "cos_hmac_keys": {"access_key_id": "AKID5", "secret_access_key": "` + tSecret + `"},
  "endpoints": "https://control.cloud-object-storage.cloud.ibm.com/v2/endpoints",
  "iam_apikey_name": "etcd-backup",
  "resource_instance_id": "crn:v1:bluemix:public:cloud-object-storage:global:a/2::"
}`},
			kind:   "hmac",
			id:     "AKID5",
			secret: tSecret,
		},
		{
			name: "service-credential-json-apikey",
			files: map[string]string{"credentials": `{"apikey": "` + tAPIKey2 + `",
 "resource_instance_id": "crn:v1:bluemix:public:cloud-object-storage:global:a/3::"}`},
			env:    []string{cos.EnvAuthEndpoint, "https://iam.example/from-env"},
			kind:   "iam",
			secret: tAPIKey2,
			inst:   "crn:v1:bluemix:public:cloud-object-storage:global:a/3::",
			authEP: "https://iam.example/from-env",
		},
		{
			name:   "apikey-files",
			files:  map[string]string{"apikey": tAPIKey + "\n", "resource_instance_id": "crn:v1:inst-4\n"},
			kind:   "iam",
			secret: tAPIKey,
			inst:   "crn:v1:inst-4",
		},
		{
			name:    "id-without-secret",
			files:   map[string]string{"access_key_id": "AKID6"},
			wantErr: []string{"incomplete HMAC credentials", "directory"},
		},
		{
			name:    "secret-without-id",
			files:   map[string]string{"secret_access_key": tSecret},
			wantErr: []string{"incomplete HMAC credentials"},
		},
		{
			name:    "ini-without-secret",
			files:   map[string]string{"credentials": "[default]\naws_access_key_id = AKID7\n"},
			wantErr: []string{"incomplete HMAC credentials"},
		},
		{
			name:    "ini-other-profile-only",
			files:   map[string]string{"credentials": "[prod]\naws_access_key_id = AKID8\naws_secret_access_key = " + tSecret2 + "\n"},
			wantErr: []string{"no credentials found"},
		},
		{
			name:    "bad-json",
			files:   map[string]string{"credentials": `{"apikey": "` + tAPIKey + `", oops}`},
			wantErr: []string{"not valid service-credential JSON"},
		},
		{
			name:    "empty-dir",
			files:   map[string]string{"unrelated": tSecret},
			wantErr: []string{"access_key_id", "apikey", "credentials"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := secretDir(t, tc.files)
			c, ok := loadCredentials(t, dir, tc.env, tc.wantErr)
			if !ok {
				return
			}
			if c.Kind() != tc.kind {
				t.Fatalf("Kind = %q, want %q", c.Kind(), tc.kind)
			}
			if !strings.Contains(c.Source, dir) || !strings.Contains(c.String(), dir) {
				t.Errorf("Source %q / String %q do not name the directory %s", c.Source, c, dir)
			}
			switch tc.kind {
			case "hmac":
				if c.AccessKeyID != tc.id || c.SecretAccessKey != tc.secret || c.APIKey != "" {
					t.Errorf("HMAC credentials: id %q, secret ok %v, api key set %v", c.AccessKeyID, c.SecretAccessKey == tc.secret, c.APIKey != "")
				}
			case "iam":
				if c.APIKey != tc.secret || c.ServiceInstanceID != tc.inst || c.AccessKeyID != "" || c.SecretAccessKey != "" {
					t.Errorf("IAM credentials: api key ok %v, instance %q (want %q)", c.APIKey == tc.secret, c.ServiceInstanceID, tc.inst)
				}
			}
			if c.AuthEndpoint != tc.authEP {
				t.Errorf("AuthEndpoint = %q, want %q", c.AuthEndpoint, tc.authEP)
			}
		})
	}
}

func TestLoadCredentialsBadDir(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "nope")
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte(tSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	env := envMap(cos.EnvAccessKeyID, "AKID", cos.EnvSecretAccessKey, tSecret) // not a fallback
	for _, dir := range []string{missing, file} {
		c, err := cos.LoadCredentials(dir, env)
		noSecrets(t, c, err)
		if err == nil || !strings.Contains(err.Error(), "cos: credentials directory") || !strings.Contains(err.Error(), dir) {
			t.Errorf("LoadCredentials(%s): %v, %v", dir, c, err)
		}
	}
}

func TestCredentialsString(t *testing.T) {
	t.Parallel()
	if s := (cos.Credentials{}).String(); s != "no COS credentials" {
		t.Errorf("String of none = %q", s)
	}
	c := cos.Credentials{APIKey: tAPIKey, Source: "environment"}
	if s := c.String(); s != "COS iam credentials from environment" {
		t.Errorf("String = %q", s)
	}
	noSecrets(t, c, nil)
}

func TestNewCredentialErrors(t *testing.T) {
	t.Parallel()
	base := cos.Config{Endpoint: "https://s3.example.invalid", Bucket: "b"}
	for _, tc := range []struct {
		name  string
		creds cos.Credentials
		want  string
	}{
		{"none", cos.Credentials{}, "cos: no credentials"},
		{"incomplete", cos.Credentials{SecretAccessKey: tSecret, Source: "test"}, "incomplete HMAC credentials"},
	} {
		cfg := base
		cfg.Creds = tc.creds
		s, err := cos.New(cfg)
		noSecrets(t, tc.creds, err)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New: %v, %v; want an error about %q", tc.name, s, err, tc.want)
		}
	}
}

// iamServer is a loopback IAM token endpoint that rejects every API key
// the way IBM Cloud IAM does.
type iamServer struct {
	*httptest.Server
	mu   sync.Mutex
	keys []string // the API keys it was sent
}

func startIAMServer(tb testing.TB) *iamServer {
	tb.Helper()
	s := &iamServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		form, _ := url.ParseQuery(string(body))
		s.mu.Lock()
		s.keys = append(s.keys, form.Get("apikey"))
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"context":{"requestId":"abc","requestType":"incoming.Identity_Token","userAgent":"go","url":"https://iam.cloud.ibm.com","instanceId":"iamid","threadId":"1","host":"iam","startTime":"now","endTime":"now","elapsedTime":"1","locale":"en_US","clusterName":"iam"},"errorCode":"BXNIM0415E","errorMessage":"Provided API key could not be found."}`)
	}))
	tb.Cleanup(s.Close)
	return s
}

func (s *iamServer) received() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.keys...)
}

func TestIAMCredentials(t *testing.T) {
	t.Parallel()
	iam := startIAMServer(t)
	creds := cos.Credentials{APIKey: tAPIKey, ServiceInstanceID: "crn:v1:inst", AuthEndpoint: iam.URL, Source: "test"}

	// New builds an IAM store without any network access.
	s, err := cos.New(cos.Config{
		Endpoint:   fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t)), // nothing listens: the token fails first
		Bucket:     "b",
		Creds:      creds,
		MaxRetries: -1,
	})
	if err != nil {
		t.Fatalf("New with IAM credentials: %v", err)
	}
	if got := iam.received(); len(got) != 0 {
		t.Fatalf("New contacted the IAM endpoint %d times", len(got))
	}
	noSecrets(t, creds, nil)
	if out := fmt.Sprintf("%v %+v %#v", s, s, s); strings.Contains(out, tAPIKey) {
		t.Fatalf("formatting the Store shows the API key: %s", out)
	}
	if _, err := cos.New(cos.Config{Endpoint: "s3.us-south.cloud-object-storage.appdomain.cloud", Bucket: "b",
		Creds: cos.Credentials{APIKey: tAPIKey}}); err != nil {
		t.Fatalf("New with IAM credentials and the default IAM endpoint: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = s.Check(ctx)
	if err == nil {
		t.Fatal("Check with an API key that IAM rejects succeeded")
	}
	noSecrets(t, creds, err)
	if !strings.HasPrefix(err.Error(), "cos: head bucket b: ") || !strings.Contains(err.Error(), "BXNIM0415E") {
		t.Errorf("Check: %v: want \"cos: head bucket b: ...\" with IAM's error", err)
	}
	if store.IsTransient(err) {
		t.Errorf("IsTransient(%v) = true for a rejected API key", err)
	}
	_, err = s.Put(ctx, "k", strings.NewReader("x"))
	if err == nil {
		t.Fatal("Put with an API key that IAM rejects succeeded")
	}
	noSecrets(t, creds, err)
	// Not vacuous: the key did go to the IAM endpoint (and only there).
	got := iam.received()
	if len(got) == 0 || got[0] != tAPIKey {
		t.Fatalf("the IAM endpoint received %d requests; first API key correct: %v", len(got), len(got) > 0 && got[0] == tAPIKey)
	}
}
