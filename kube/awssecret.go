package kube

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Keys of an etcd-operator awsSecret (spec.s3.awsSecret of an EtcdBackup or
// EtcdRestore): etcd-operator writes them to files and gives them to the AWS
// SDK as its shared credentials and shared config files, profile
// "default". Nothing else in the secret is read.
const (
	AWSSecretCredentialsKey = "credentials"
	AWSSecretConfigKey      = "config"
)

// AWSSecretError is an awsSecret etcd-operator cannot use: what is missing
// (never a value).
type AWSSecretError struct {
	Namespace, Name string
	Missing         []string
	Keys            []string // the secret's keys, as found
}

func (e *AWSSecretError) Error() string {
	return fmt.Sprintf("etcd-operator cannot read secret %s/%s (spec.s3.awsSecret, --aws-secret): it needs key %q in AWS shared-credentials format "+
		"([default] aws_access_key_id = ..., aws_secret_access_key = ...) and key %q in AWS shared-config format ([default] region = ...); "+
		"missing: %s (the secret has keys %s). Put the COS HMAC keys and region in that format into it "+
		"(kubectl -n %s create secret generic %s --from-file=credentials=FILE --from-file=config=FILE), or point --aws-secret at a secret that has them; "+
		"etcd-recovery reads that format too",
		e.Namespace, e.Name, AWSSecretCredentialsKey, AWSSecretConfigKey, strings.Join(e.Missing, "; "), keyList(e.Keys), e.Namespace, e.Name)
}

func keyList(keys []string) string {
	if len(keys) == 0 {
		return "none"
	}
	return strings.Join(keys, ", ")
}

// CheckAWSSecret checks that the secret name of the client's namespace is
// one etcd-operator can read S3 credentials from: key "credentials" with
// [default] aws_access_key_id and aws_secret_access_key, key "config" with
// [default] region. A secret in another format fails with an
// *AWSSecretError, a missing one with a NotFound error. When the secret
// cannot be read at all (403: the toolkit may read only cos-credentials),
// nothing can be checked: the returned warning says so and err is nil.
func (k *Client) CheckAWSSecret(ctx context.Context, name string) (warning string, err error) {
	sec, err := k.Core.Secrets(k.Namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		return fmt.Sprintf("cannot read secret %s/%s to check that etcd-operator can use it (%v); if it lacks keys %q and %q "+
			"in AWS shared-file format, etcd-operator's restore fails and the EtcdRestore reports why",
			k.Namespace, name, apierrors.ReasonForError(err), AWSSecretCredentialsKey, AWSSecretConfigKey), nil
	case apierrors.IsNotFound(err):
		return "", fmt.Errorf("secret %s/%s not found: etcd-operator reads the S3 credentials from it; create it with keys %q and %q "+
			"(AWS shared-file format), or point --aws-secret at one that exists (default %s)",
			k.Namespace, name, AWSSecretCredentialsKey, AWSSecretConfigKey, COSSecretName)
	case err != nil:
		return "", fmt.Errorf("reading secret %s/%s: %w", k.Namespace, name, ctxErr(ctx, err))
	}
	var keys []string
	for key := range sec.Data {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	var missing []string
	if b, ok := sec.Data[AWSSecretCredentialsKey]; !ok {
		missing = append(missing, fmt.Sprintf("key %q", AWSSecretCredentialsKey))
	} else {
		f := iniDefault(b)
		for _, want := range []string{"aws_access_key_id", "aws_secret_access_key"} {
			if f[want] == "" {
				missing = append(missing, fmt.Sprintf("%s in [default] of %q", want, AWSSecretCredentialsKey))
			}
		}
	}
	if b, ok := sec.Data[AWSSecretConfigKey]; !ok {
		missing = append(missing, fmt.Sprintf("key %q", AWSSecretConfigKey))
	} else if iniDefault(b)["region"] == "" {
		missing = append(missing, fmt.Sprintf("region in [default] of %q", AWSSecretConfigKey))
	}
	if len(missing) > 0 {
		return "", &AWSSecretError{Namespace: k.Namespace, Name: name, Missing: missing, Keys: keys}
	}
	return "", nil
}

// iniDefault is the [default] section of an AWS shared credentials or
// config file, as the AWS SDK reads it for profile "default" (the config
// file may also spell it [profile default]).
func iniDefault(b []byte) map[string]string {
	out := map[string]string{}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			section = strings.Join(strings.Fields(line[1:len(line)-1]), " ")
			continue
		}
		if section != "default" && section != "profile default" {
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok {
			out[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return out
}
