package cos

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/IBM/ibm-cos-sdk-go/aws"
	"github.com/IBM/ibm-cos-sdk-go/aws/credentials"
	"github.com/IBM/ibm-cos-sdk-go/aws/credentials/ibmiam"
)

// DefaultIAMEndpoint is IBM Cloud's IAM token endpoint.
const DefaultIAMEndpoint = "https://iam.cloud.ibm.com/identity/token"

// Credentials are COS credentials: HMAC keys or an IAM API key. They are
// read from the environment or a mounted secret, never from argv, and they
// print as a redacted description.
type Credentials struct {
	AccessKeyID       string
	SecretAccessKey   string
	APIKey            string
	ServiceInstanceID string
	AuthEndpoint      string
	Source            string // where they came from, for logs: "env", "dir /etc/cos", ...
}

// Kind is "hmac", "iam" or "" (none).
func (c Credentials) Kind() string {
	switch {
	case c.AccessKeyID != "" || c.SecretAccessKey != "":
		return "hmac"
	case c.APIKey != "":
		return "iam"
	}
	return ""
}

// String never shows a secret.
func (c Credentials) String() string {
	if c.Kind() == "" {
		return "no COS credentials"
	}
	return fmt.Sprintf("COS %s credentials from %s", c.Kind(), c.Source)
}

// GoString never shows a secret, even under %#v.
func (c Credentials) GoString() string { return c.String() }

// Environment variables read for credentials.
const (
	EnvAccessKeyID       = "COS_ACCESS_KEY_ID"
	EnvSecretAccessKey   = "COS_SECRET_ACCESS_KEY"
	EnvAPIKey            = "COS_API_KEY"
	EnvServiceInstanceID = "COS_SERVICE_INSTANCE_ID"
	EnvAuthEndpoint      = "COS_AUTH_ENDPOINT"
)

// LoadCredentials finds credentials: in dir when it is set (the mounted
// cos-credentials secret), else HMAC keys in COS_ACCESS_KEY_ID /
// COS_SECRET_ACCESS_KEY, else an IAM API key in COS_API_KEY.
func LoadCredentials(dir string, getenv func(string) string) (Credentials, error) {
	if dir != "" {
		c, err := loadDir(dir)
		if err != nil {
			return Credentials{}, err
		}
		if c.AuthEndpoint == "" {
			c.AuthEndpoint = getenv(EnvAuthEndpoint)
		}
		return c, c.validate()
	}
	c := Credentials{
		AccessKeyID:       getenv(EnvAccessKeyID),
		SecretAccessKey:   getenv(EnvSecretAccessKey),
		APIKey:            getenv(EnvAPIKey),
		ServiceInstanceID: getenv(EnvServiceInstanceID),
		AuthEndpoint:      getenv(EnvAuthEndpoint),
		Source:            "environment",
	}
	if c.Kind() == "" {
		return Credentials{}, errors.New("cos: no credentials: set COS_ACCESS_KEY_ID and COS_SECRET_ACCESS_KEY, or COS_API_KEY, or --cos-credentials-dir")
	}
	if c.Kind() == "hmac" && c.APIKey != "" {
		return Credentials{}, errors.New("cos: both HMAC keys (COS_ACCESS_KEY_ID) and an IAM API key (COS_API_KEY) are set: set only one")
	}
	return c, c.validate()
}

func (c Credentials) validate() error {
	switch c.Kind() {
	case "hmac":
		if c.AccessKeyID == "" || c.SecretAccessKey == "" {
			return fmt.Errorf("cos: incomplete HMAC credentials from %s: both the access key id and the secret access key are needed", c.Source)
		}
	case "iam":
	default:
		return fmt.Errorf("cos: no credentials found in %s", c.Source)
	}
	return nil
}

// loadDir reads a mounted secret. It understands, in this order:
//   - access_key_id + secret_access_key files (one value each);
//   - apikey (+ resource_instance_id) files, for IAM;
//   - a "credentials" file: AWS shared-credentials INI ([default]
//     aws_access_key_id / aws_secret_access_key), the form etcd-operator's
//     backup secrets use, or IBM COS service-credential JSON (apikey,
//     resource_instance_id, cos_hmac_keys).
func loadDir(dir string) (Credentials, error) {
	src := "directory " + dir
	st, err := os.Stat(dir)
	if err != nil {
		return Credentials{}, fmt.Errorf("cos: credentials directory: %w", err)
	}
	if !st.IsDir() {
		return Credentials{}, fmt.Errorf("cos: credentials directory %s is not a directory", dir)
	}
	read := func(name string) (string, bool, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, os.ErrNotExist) {
			return "", false, nil
		}
		if err != nil {
			return "", false, fmt.Errorf("cos: credentials file %s: %w", name, err)
		}
		return strings.TrimSpace(string(b)), true, nil
	}
	id, okID, err := read("access_key_id")
	if err != nil {
		return Credentials{}, err
	}
	secret, okSecret, err := read("secret_access_key")
	if err != nil {
		return Credentials{}, err
	}
	if okID || okSecret {
		return Credentials{AccessKeyID: id, SecretAccessKey: secret, Source: src}, nil
	}
	apikey, okKey, err := read("apikey")
	if err != nil {
		return Credentials{}, err
	}
	if okKey {
		inst, _, err := read("resource_instance_id")
		if err != nil {
			return Credentials{}, err
		}
		return Credentials{APIKey: apikey, ServiceInstanceID: inst, Source: src}, nil
	}
	body, ok, err := read("credentials")
	if err != nil {
		return Credentials{}, err
	}
	if !ok {
		return Credentials{}, fmt.Errorf("cos: credentials directory %s has none of access_key_id/secret_access_key, apikey or credentials", dir)
	}
	if strings.HasPrefix(body, "{") {
		return parseServiceCredentials([]byte(body), src+" (credentials, JSON)")
	}
	return parseSharedCredentials(body, src+" (credentials)")
}

func parseServiceCredentials(b []byte, src string) (Credentials, error) {
	var sc struct {
		APIKey             string `json:"apikey"`
		ResourceInstanceID string `json:"resource_instance_id"`
		HMAC               *struct {
			AccessKeyID     string `json:"access_key_id"`
			SecretAccessKey string `json:"secret_access_key"`
		} `json:"cos_hmac_keys"`
	}
	if err := json.Unmarshal(b, &sc); err != nil {
		// The JSON error could quote a secret: don't include it.
		return Credentials{}, fmt.Errorf("cos: %s: not valid service-credential JSON", src)
	}
	if sc.HMAC != nil && sc.HMAC.AccessKeyID != "" {
		return Credentials{AccessKeyID: sc.HMAC.AccessKeyID, SecretAccessKey: sc.HMAC.SecretAccessKey, Source: src}, nil
	}
	return Credentials{APIKey: sc.APIKey, ServiceInstanceID: sc.ResourceInstanceID, Source: src}, nil
}

func parseSharedCredentials(body, src string) (Credentials, error) {
	c := Credentials{Source: src}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader([]byte(body)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			section = strings.TrimSpace(line[1 : len(line)-1])
			continue
		}
		if section != "default" && section != "" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "aws_access_key_id":
			c.AccessKeyID = strings.TrimSpace(v)
		case "aws_secret_access_key":
			c.SecretAccessKey = strings.TrimSpace(v)
		case "ibm_api_key_id":
			c.APIKey = strings.TrimSpace(v)
		case "ibm_service_instance_id":
			c.ServiceInstanceID = strings.TrimSpace(v)
		case "ibm_auth_endpoint":
			c.AuthEndpoint = strings.TrimSpace(v)
		}
	}
	return c, nil
}

// provider turns the credentials into the SDK's provider: static HMAC keys,
// or the SDK's own ibmiam provider for an API key.
func (c Credentials) provider(hc *http.Client) (*credentials.Credentials, error) {
	switch c.Kind() {
	case "hmac":
		if err := c.validate(); err != nil {
			return nil, err
		}
		return credentials.NewStaticCredentials(c.AccessKeyID, c.SecretAccessKey, ""), nil
	case "iam":
		ep := c.AuthEndpoint
		if ep == "" {
			ep = DefaultIAMEndpoint
		}
		return ibmiam.NewStaticCredentials(aws.NewConfig().WithHTTPClient(hc), ep, c.APIKey, c.ServiceInstanceID), nil
	}
	return nil, errors.New("cos: no credentials: set COS_ACCESS_KEY_ID and COS_SECRET_ACCESS_KEY, or COS_API_KEY, or --cos-credentials-dir")
}
