package main

import (
	"context"
	"fmt"
	"os"

	"github.com/armada/etcd-recovery/internal/store/cos"
	"github.com/armada/etcd-recovery/kube"
)

// cosCredentialsFromSecret reads the namespace's COS credentials secret
// through the API (kube.Client.COSCredentials) and parses it as the COS
// backend parses a mounted secret, in any format cos.LoadCredentials
// accepts. The files live in a private temp dir only while they are parsed.
func cosCredentialsFromSecret(ctx context.Context, k *kube.Client, getenv func(string) string) (cos.Credentials, error) {
	sec, err := k.COSCredentials(ctx, "")
	if err != nil {
		return cos.Credentials{}, err
	}
	dir, err := os.MkdirTemp("", "etcd-recovery-cos-")
	if err != nil {
		return cos.Credentials{}, err
	}
	defer os.RemoveAll(dir)
	if err := sec.WriteFiles(dir); err != nil {
		return cos.Credentials{}, err
	}
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	creds, err := cos.LoadCredentials(dir, getenv)
	if err != nil {
		return cos.Credentials{}, fmt.Errorf("COS credentials secret %s/%s: %w", sec.Namespace, sec.Name, err)
	}
	creds.Source = sec.Source()
	return creds, nil
}
