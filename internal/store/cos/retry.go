package cos

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/IBM/ibm-cos-sdk-go/aws/awserr"
	"github.com/IBM/ibm-cos-sdk-go/aws/client"
	"github.com/IBM/ibm-cos-sdk-go/aws/request"

	"github.com/armada/etcd-recovery/internal/store"
)

// retryer is the SDK's default retryer, plus connection resets.
//
// The SDK deliberately does not retry an error whose text holds "read:
// connection reset" (aws/request/connection_reset_error.go): a reset while
// reading the answer means the request may have been applied. That is how
// "connection reset by peer" failed a v2 PUT and a multipart upload at once.
// Every request this store makes is safe to repeat: PutObject and
// UploadPart write the same bytes to the same key or part, DeleteObjects
// and AbortMultipartUpload are idempotent, reads are reads, a repeated
// CompleteMultipartUpload fails (NoSuchUpload, or 412 with If-None-Match)
// rather than writing twice, and a repeated CreateMultipartUpload's extra
// upload is aborted by Put (abortKeyUploads). So resets are retried, with
// the same limit and backoff as other transient errors. A cancelled or
// stalled call is never retried. Under store.FailFastOnConnect (a site's
// check) a connection that cannot be made is not retried either.
type retryer struct{ client.DefaultRetryer }

func (r retryer) ShouldRetry(req *request.Request) bool {
	if ctx := req.Context(); ctx != nil && ctx.Err() != nil {
		return false
	}
	if isMisconfigured(req.Error) {
		return false
	}
	if ctx := req.Context(); ctx != nil && store.FailsFastOnConnect(ctx) && isConnectFailure(req.Error) {
		return false
	}
	if req.Retryable == nil && isReset(req.Error) {
		return true
	}
	return r.DefaultRetryer.ShouldRetry(req)
}

// RetryRules is the SDK's delay, capped at MaxRetryDelay (Config's
// MaxBackoff). The SDK adds a 503's or 429's Retry-After to its backoff
// uncapped, and MinIO answers "Retry-After: 60" while it initializes after
// a restart (COS may answer a SlowDown the same way): one such answer put
// a minute's sleep inside an abort window of a minute, and the multipart
// upload of a failed backup was left behind with the store already back.
// Waiting at most MaxBackoff and asking again is as polite, and keeps every
// call inside its caller's deadline.
func (r retryer) RetryRules(req *request.Request) time.Duration {
	d := r.DefaultRetryer.RetryRules(req)
	if limit := max(r.MaxRetryDelay, r.MaxThrottleDelay); limit > 0 && d > limit {
		return limit
	}
	return d
}

// isMisconfigured reports an error no retry can cure, because the
// endpoint itself is wrong: its host name does not exist (an
// authoritative "no such host", not a DNS server that fails to answer) or
// its certificate does not verify (an unknown CA, another host's name, an
// expired or invalid certificate). The SDK retries both as request errors;
// retried, a typo in --cos-endpoint cost every call its full retry budget
// and read as an outage (and --site auto would have read the second site
// instead of saying what to fix). Such an error is permanent
// (sdkTransient), and hint names the cause.
func isMisconfigured(err error) bool {
	return misconfiguration(err) != ""
}

// misconfiguration says what is wrong with the endpoint ("" when err is
// not a misconfiguration: see isMisconfigured).
func misconfiguration(err error) string {
	for depth := 0; err != nil && depth < 16; depth++ {
		var dns *net.DNSError
		if errors.As(err, &dns) && dns.IsNotFound {
			return "the COS endpoint's host name does not resolve (" + dns.Name + "): check --cos-endpoint"
		}
		var (
			unknown  x509.UnknownAuthorityError
			hostname x509.HostnameError
			invalid  x509.CertificateInvalidError
			verify   *tls.CertificateVerificationError
		)
		switch {
		case errors.As(err, &unknown):
			return "the COS endpoint's certificate is not trusted: pass its CA with --cos-ca-file"
		case errors.As(err, &hostname), errors.As(err, &invalid), errors.As(err, &verify):
			return "the COS endpoint's certificate does not verify: check --cos-endpoint and --cos-ca-file"
		}
		var aerr awserr.Error
		if errors.As(err, &aerr) && aerr.OrigErr() != nil && aerr.OrigErr() != err {
			err = aerr.OrigErr()
			continue
		}
		err = errors.Unwrap(err)
	}
	return ""
}

// isConnectFailure is store.IsConnectFailure looking through the SDK's
// wrapped errors (awserr.Error has no Unwrap).
func isConnectFailure(err error) bool {
	if store.IsConnectFailure(err) {
		return true
	}
	for _, o := range origErrs(err) {
		if store.IsConnectFailure(o) {
			return true
		}
	}
	return false
}

// isReset reports whether err is a connection reset, a broken pipe or a
// connection cut mid-message, looking through the SDK's wrapped errors
// (awserr.Error has no Unwrap).
func isReset(err error) bool {
	for depth := 0; err != nil && depth < 16; depth++ {
		if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
			errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, io.ErrUnexpectedEOF) {
			return true
		}
		msg := err.Error()
		if strings.Contains(msg, "connection reset") || strings.Contains(msg, "broken pipe") {
			return true
		}
		var aerr awserr.Error
		if errors.As(err, &aerr) && aerr.OrigErr() != nil && aerr.OrigErr() != err {
			err = aerr.OrigErr()
			continue
		}
		err = errors.Unwrap(err)
	}
	return false
}
