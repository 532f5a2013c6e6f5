package cos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/armada/etcd-recovery/internal/store"
)

// Kind is the kind this backend registers under (store.Open), and the
// scheme of its store URLs (cos://bucket/prefix?endpoint=...).
const Kind = "cos"

// KindS3 is the same backend under the scheme S3 users write
// (s3://bucket/prefix?endpoint=...): COS speaks the S3 API, and so does
// every store this backend is tested against (MinIO).
const KindS3 = "s3"

func init() {
	store.Register(Kind, open)
	store.Register(KindS3, open)
}

// open is the store.Factory of COS: the credentials first (the mounted
// directory, else the environment, else cfg.FallbackCredentials), then
// the neutral settings mapped onto Config.
func open(ctx context.Context, cfg store.Config) (store.Store, error) {
	creds, err := credentialsFor(ctx, cfg)
	if err != nil {
		return nil, err
	}
	retries := cfg.MaxRetries
	switch {
	case retries == 0:
		retries = -1 // Config: 0 means the default, -1 none
	case retries < 0:
		retries = 0
	}
	minRate := Throughput{}
	if cfg.MinThroughput != "" {
		if minRate, err = ParseThroughput(cfg.MinThroughput); err != nil {
			return nil, fmt.Errorf("--cos-min-throughput: %w", err)
		}
	}
	return New(Config{
		Endpoint:      cfg.Endpoint,
		Region:        cfg.Region,
		Bucket:        cfg.Bucket,
		Creds:         creds,
		CAFile:        cfg.CAFile,
		MaxRetries:    retries,
		StallTimeout:  cfg.StallTimeout,
		MinThroughput: minRate,
	})
}

// credentialsFor loads the credentials of cfg: from CredentialsDir or the
// environment when either holds any, else from FallbackCredentials (whose
// error is returned as it is).
func credentialsFor(ctx context.Context, cfg store.Config) (Credentials, error) {
	getenv := cfg.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	local := cfg.CredentialsDir != "" || getenv(EnvAccessKeyID) != "" || getenv(EnvAPIKey) != ""
	if local || cfg.FallbackCredentials == nil {
		return LoadCredentials(cfg.CredentialsDir, getenv)
	}
	sec, err := cfg.FallbackCredentials(ctx)
	if err != nil {
		return Credentials{}, err
	}
	if sec == nil {
		return LoadCredentials("", getenv)
	}
	return secretCredentials(sec, getenv)
}

// secretCredentials parses a secret read through an API exactly as a
// mounted one: its keys are written as files (0600) into a private temp
// dir that lives only while LoadCredentials reads it. Keys that are not
// plain file names are skipped, as the kubelet would not mount them.
func secretCredentials(sec *store.SecretFiles, getenv func(string) string) (Credentials, error) {
	dir, err := os.MkdirTemp("", "etcd-recovery-cos-")
	if err != nil {
		return Credentials{}, err
	}
	defer os.RemoveAll(dir)
	for key, b := range sec.Files {
		if key == "" || key[0] == '.' || strings.ContainsAny(key, "/\\") {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, key), b, 0o600); err != nil {
			return Credentials{}, err
		}
	}
	creds, err := LoadCredentials(dir, getenv)
	if err != nil {
		return Credentials{}, fmt.Errorf("COS credentials %s: %w", sec.Source, err)
	}
	creds.Source = sec.Source
	return creds, nil
}
