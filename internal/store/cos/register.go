package cos

import (
	"context"
	"fmt"

	"github.com/armada/etcd-recovery/internal/store"
)

// Kind is the kind this backend registers under (store.Open).
const Kind = "cos"

func init() { store.Register(Kind, open) }

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
	v, err := cfg.FallbackCredentials(ctx)
	if err != nil {
		return Credentials{}, err
	}
	switch c := v.(type) {
	case Credentials:
		return c, nil
	case *Credentials:
		if c != nil {
			return *c, nil
		}
	}
	return Credentials{}, fmt.Errorf("cos: credentials of type %T: want cos.Credentials", v)
}
