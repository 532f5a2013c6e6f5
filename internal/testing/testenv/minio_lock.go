package testenv

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/IBM/ibm-cos-sdk-go/aws"
	"github.com/IBM/ibm-cos-sdk-go/aws/credentials"
	v4 "github.com/IBM/ibm-cos-sdk-go/aws/signer/v4"
	"github.com/IBM/ibm-cos-sdk-go/service/s3"
)

// NewLockedBucket creates a bucket with object lock (and so versioning,
// which object lock turns on for good) and a fresh valid name, and returns
// the name. Object lock can only be enabled when a bucket is created
// (CreateBucket with x-amz-bucket-object-lock-enabled). The bucket has no
// default retention: a test puts each object with its own.
//
// A version under COMPLIANCE retention cannot be removed by anyone, root
// included, until it expires: a test on the SharedMinIO server uses
// GOVERNANCE or short retentions.
func (m *MinIO) NewLockedBucket(tb testing.TB) string {
	tb.Helper()
	name := "testenv-lock-" + strings.ToLower(randAlnum(12))
	cli := m.S3(tb)
	m.createBucket(tb, cli, "locked bucket", &s3.CreateBucketInput{Bucket: aws.String(name), ObjectLockEnabledForBucket: aws.Bool(true)})
	v, err := cli.GetBucketVersioning(&s3.GetBucketVersioningInput{Bucket: aws.String(name)})
	if err != nil || aws.StringValue(v.Status) != s3.BucketVersioningStatusEnabled {
		tb.Fatalf("testenv: locked bucket %s: versioning %v, %v; want Enabled", name, v, err)
	}
	return name
}

// NewVersionedBucket creates a bucket with versioning but no object lock
// and returns its name.
func (m *MinIO) NewVersionedBucket(tb testing.TB) string {
	tb.Helper()
	name := m.NewBucket(tb)
	_, err := m.S3(tb).PutBucketVersioning(&s3.PutBucketVersioningInput{
		Bucket:                  aws.String(name),
		VersioningConfiguration: &s3.VersioningConfiguration{Status: aws.String(s3.BucketVersioningStatusEnabled)},
	})
	if err != nil {
		tb.Fatalf("testenv: enabling versioning on %s: %v", name, err)
	}
	return name
}

// Credential is an S3 access key of a MinIO server: static, or temporary
// (SessionToken set).
type Credential struct {
	AccessKey, SecretKey, SessionToken string
}

// S3With returns an S3 client for this server using cred instead of the
// root credentials.
func (m *MinIO) S3With(tb testing.TB, cred Credential) *s3.S3 {
	tb.Helper()
	cfg := m.AWSConfig()
	cfg.Credentials = credentials.NewStaticCredentials(cred.AccessKey, cred.SecretKey, cred.SessionToken)
	sess, err := m.session(cfg)
	if err != nil {
		tb.Fatalf("testenv: S3 session for %s: %v", m.Endpoint, err)
	}
	return s3.New(sess)
}

// WriteOnlyActions are the actions of the backup CronJob's credential on
// a locked bucket: it writes, reads and lists, and can neither delete a
// version nor bypass governance retention (s3:PutObjectRetention is left
// out too: it could not shorten a lock, but it has no need to set one
// after the write).
var WriteOnlyActions = []string{"s3:PutObject", "s3:GetObject", "s3:ListBucket"}

// RestrictedCredential returns a temporary credential limited to actions
// on bucket (and its objects), valid for an hour: MinIO's STS AssumeRole,
// called with the root credentials and a session policy, whose grants are
// the intersection of the root's (everything) and the policy's. MinIO has
// no other way to make a limited user without its admin API (madmin-go,
// which is not a dependency, or mc).
//
// Its denials are real S3 denials: DeleteObject of a version, or with
// x-amz-bypass-governance-retention, answers AccessDenied.
func (m *MinIO) RestrictedCredential(tb testing.TB, bucket string, actions ...string) Credential {
	tb.Helper()
	policy, err := json.Marshal(map[string]any{
		"Version": "2012-10-17",
		"Statement": []map[string]any{{
			"Effect":   "Allow",
			"Action":   actions,
			"Resource": []string{"arn:aws:s3:::" + bucket, "arn:aws:s3:::" + bucket + "/*"},
		}},
	})
	if err != nil {
		tb.Fatal(err)
	}
	cred, err := m.assumeRole(string(policy), time.Hour)
	if err != nil {
		tb.Fatalf("testenv: STS AssumeRole on %s: %v", m.Endpoint, err)
	}
	return cred
}

// assumeRole calls STS AssumeRole (POST / with a form, SigV4 service
// "sts") with the root credentials and a session policy.
func (m *MinIO) assumeRole(policy string, d time.Duration) (Credential, error) {
	form := url.Values{
		"Action":          {"AssumeRole"},
		"Version":         {"2011-06-15"},
		"DurationSeconds": {fmt.Sprint(int(d.Seconds()))},
		"Policy":          {policy},
	}
	body := form.Encode()
	req, err := http.NewRequest(http.MethodPost, m.Endpoint+"/", strings.NewReader(body))
	if err != nil {
		return Credential{}, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	signer := v4.NewSigner(credentials.NewStaticCredentials(m.AccessKey, m.SecretKey, ""))
	if _, err := signer.Sign(req, bytes.NewReader([]byte(body)), "sts", m.Region, time.Now()); err != nil {
		return Credential{}, err
	}
	hc := m.httpClient(30 * time.Second)
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		return Credential{}, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return Credential{}, fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(b))
	}
	var out struct {
		Result struct {
			Credentials struct {
				AccessKeyID     string `xml:"AccessKeyId"`
				SecretAccessKey string `xml:"SecretAccessKey"`
				SessionToken    string `xml:"SessionToken"`
			} `xml:"Credentials"`
		} `xml:"AssumeRoleResult"`
	}
	if err := xml.Unmarshal(b, &out); err != nil {
		return Credential{}, fmt.Errorf("decoding the AssumeRole answer: %w", err)
	}
	c := out.Result.Credentials
	if c.AccessKeyID == "" || c.SecretAccessKey == "" {
		return Credential{}, errors.New("AssumeRole answered no credentials")
	}
	return Credential{AccessKey: c.AccessKeyID, SecretKey: c.SecretAccessKey, SessionToken: c.SessionToken}, nil
}
