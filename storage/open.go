package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"time"
)

// Defaults of Options.
const (
	DefaultPartSize       = 4 << 20
	DefaultParallel       = 4
	DefaultConcurrent     = 80
	DefaultAttemptTimeout = 30 * time.Second
	DefaultReadDeadline   = 2 * time.Minute
	DefaultUploadDeadline = 2 * time.Minute
	DefaultMaxRetries     = 8
	DefaultBackoffBase    = 100 * time.Millisecond
	DefaultBackoffMax     = 5 * time.Second
)

// MaxDeadline bounds the timeouts and deadlines of Options, so that sums
// of them stay durations.
const MaxDeadline = 7 * 24 * time.Hour

// Options configures Open. The zero value gives the defaults;
// Validate fills them in.
type Options struct {
	// Logger receives warnings (a refused O_DIRECT, retried requests). The
	// default is slog.Default(). Nothing is logged per successful read, and
	// credentials are never logged.
	Logger *slog.Logger

	// File sources. By default a file source reads with pread and then
	// drops the range it read from the kernel page cache
	// (POSIX_FADV_DONTNEED): the Cache holds the pages, the kernel need not
	// hold them twice. Readahead is off for its descriptor
	// (POSIX_FADV_RANDOM), as pages come in the Cache's order and what was
	// read ahead would stay behind.

	// DirectIO reads with O_DIRECT through aligned buffers instead, so the
	// kernel page cache is bypassed altogether. Where the filesystem
	// refuses O_DIRECT the source falls back to the default, with one
	// logged warning.
	DirectIO bool
	// KernelCache leaves the kernel page cache alone: plain pread, nothing
	// dropped. Useful when other programs read the same file.
	KernelCache bool

	// S3 sources. Settings not given here come from the standard AWS
	// environment variables (AWS_REGION, AWS_PROFILE, AWS_ENDPOINT_URL,
	// AWS_ACCESS_KEY_ID, ...) and the ~/.aws config and credentials files;
	// options given here win.

	// Endpoint is the S3 endpoint URL, for S3-compatible storage
	// (e.g. "http://127.0.0.1:7070"). Default: AWS_ENDPOINT_URL(_S3), the
	// profile's endpoint_url, or AWS itself.
	Endpoint string
	// Region is the S3 region. Default: AWS_REGION, the profile's region, or
	// us-east-1.
	Region string
	// Profile is the shared-config profile to use. Default: AWS_PROFILE or
	// "default".
	Profile string
	// PathStyle addresses buckets as endpoint/bucket/key rather than
	// bucket.endpoint/key. It is turned on by itself for an endpoint that is
	// an IP address or localhost, where virtual-host addressing cannot work.
	PathStyle bool

	// HTTP and S3 sources.

	// PartSize is the largest range one request fetches (default 4 MiB): a
	// ReadAt larger than this is split into parts fetched in parallel.
	PartSize int64
	// Parallel is the most requests one ReadAt has in flight (default 4).
	Parallel int
	// Concurrent is about how many ReadAt calls the caller makes at once
	// (default 80: a cache's default prefetches and some demand reads).
	// As many connections are kept open between requests: one dialled per
	// request would cost every hop on the way a connection setup.
	Concurrent int
	// AttemptTimeout is how long one request may go without receiving
	// anything (response headers or body bytes) before it is cancelled and
	// retried (default 30 s).
	AttemptTimeout time.Duration
	// ReadDeadline is the time one ReadAt may take, retries included
	// (default 2 min). Opening a source has the same budget.
	ReadDeadline time.Duration
	// UploadDeadline is the time one request of an upload (S3Upload) may
	// take, retries included (default 2 min), and a second more for every
	// 8 MiB of a part it sends.
	UploadDeadline time.Duration
	// MaxRetries is how many times a failed request is retried (default 8;
	// a negative value means never).
	MaxRetries int
	// BackoffBase and BackoffMax bound the wait before a retry: the n-th
	// retry waits a random time between 0 and min(BackoffMax,
	// BackoffBase·2ⁿ⁻¹) (defaults 100 ms and 5 s). A Retry-After of at most
	// BackoffMax is honoured instead.
	BackoffBase time.Duration
	BackoffMax  time.Duration
}

// Validate fills defaults and checks the options.
func (o *Options) Validate() error {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.PartSize == 0 {
		o.PartSize = DefaultPartSize
	}
	if o.Parallel == 0 {
		o.Parallel = DefaultParallel
	}
	if o.Concurrent == 0 {
		o.Concurrent = DefaultConcurrent
	}
	if o.AttemptTimeout == 0 {
		o.AttemptTimeout = DefaultAttemptTimeout
	}
	if o.ReadDeadline == 0 {
		o.ReadDeadline = DefaultReadDeadline
	}
	if o.UploadDeadline == 0 {
		o.UploadDeadline = DefaultUploadDeadline
	}
	if o.MaxRetries == 0 {
		o.MaxRetries = DefaultMaxRetries
	} else if o.MaxRetries < 0 {
		o.MaxRetries = -1
	}
	if o.BackoffBase == 0 {
		o.BackoffBase = DefaultBackoffBase
	}
	if o.BackoffMax == 0 {
		o.BackoffMax = max(DefaultBackoffMax, o.BackoffBase)
	}
	switch {
	case o.DirectIO && o.KernelCache:
		return errors.New("source options: DirectIO and KernelCache exclude each other")
	case o.PartSize < 0:
		return fmt.Errorf("source options: part size must be positive, got %d", o.PartSize)
	case o.Parallel < 0:
		return fmt.Errorf("source options: parallel requests must be at least 1, got %d", o.Parallel)
	case o.AttemptTimeout < 0:
		return fmt.Errorf("source options: attempt timeout must be positive, got %v", o.AttemptTimeout)
	case o.ReadDeadline < 0:
		return fmt.Errorf("source options: read deadline must be positive, got %v", o.ReadDeadline)
	case o.UploadDeadline < 0 || o.UploadDeadline > MaxDeadline:
		return fmt.Errorf("source options: upload deadline %v: want more than 0 and at most %v", o.UploadDeadline, MaxDeadline)
	case o.AttemptTimeout > MaxDeadline || o.ReadDeadline > MaxDeadline:
		return fmt.Errorf("source options: attempt timeout %v and read deadline %v: want each at most %v", o.AttemptTimeout, o.ReadDeadline, MaxDeadline)
	case o.BackoffBase < 0:
		return fmt.Errorf("source options: backoff base must be positive, got %v", o.BackoffBase)
	case o.BackoffMax < o.BackoffBase:
		return fmt.Errorf("source options: backoff max %v is less than backoff base %v", o.BackoffMax, o.BackoffBase)
	case o.Endpoint != "":
		u, err := url.Parse(o.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("source options: S3 endpoint %q is not an http:// or https:// URL", redactURL(o.Endpoint))
		}
		if u.User != nil {
			return fmt.Errorf("source options: S3 endpoint %q must not hold credentials: use the AWS environment or config files",
				redactURL(o.Endpoint))
		}
	}
	return nil
}

// Open opens the storage that url names:
//
//   - a path, or file:///path: a local or NFS file (FileSource);
//   - s3://bucket/key: an S3 object (S3Source);
//   - http://… or https://…: an object served with Range support
//     (HTTPSource);
//   - a URL of any other Scheme registered (Register).
//
// ctx bounds the open only, not later reads. Errors name the URL, without
// credentials.
func Open(ctx context.Context, url string, opts Options) (Source, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if url == "" {
		return nil, errors.New("open source: empty path or URL")
	}
	if p, ok, err := LocalPath(url); ok {
		if err != nil {
			return nil, err
		}
		return OpenFile(p, opts)
	}
	scheme, _, _ := splitScheme(url)
	s, ok := lookup(scheme)
	if !ok {
		return nil, fmt.Errorf("open %s: unsupported URL scheme %q (use %s)", redactURL(url), scheme, Locations())
	}
	return s.Open(ctx, url, opts)
}

// IsNetwork reports whether url names storage reached over the network
// (a registered Scheme's Network: s3://, http://, https://) rather than a
// file.
func IsNetwork(url string) bool {
	scheme, _, ok := splitScheme(url)
	if !ok {
		return false
	}
	s, ok := lookup(scheme)
	return ok && s.Network
}

// splitScheme splits "scheme://rest" into a lower-case scheme and rest; ok
// is false for anything else, which is taken for a path.
func splitScheme(s string) (scheme, rest string, ok bool) {
	i := strings.Index(s, "://")
	if i <= 0 {
		return "", "", false
	}
	for j, c := range s[:i] {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case j > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return "", "", false
		}
	}
	return strings.ToLower(s[:i]), s[i+3:], true
}

// LocalPath reports whether url names a local file, a path or a file://
// URL, and returns its path (an error for a file:// URL naming another
// host or no path).
func LocalPath(url string) (path string, ok bool, err error) {
	scheme, _, isURL := splitScheme(url)
	switch {
	case !isURL:
		return url, true, nil
	case scheme == "file":
		p, err := filePath(url)
		return p, true, err
	}
	return "", false, nil
}

// s3Object splits the rest of an s3:// URL into bucket and key.
// A URL with credentials (s3://ID:SECRET@bucket/key) is refused without
// showing them: no bucket name holds an @.
func s3Object(url, rest string) (bucket, key string, err error) {
	bucket, key, _ = strings.Cut(rest, "/")
	if strings.Contains(bucket, "@") {
		return "", "", fmt.Errorf("%s: an S3 URL holds no credentials (logs and ps would show them): give them in the AWS environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) or config files", redactURL(url))
	}
	if bucket == "" || key == "" {
		return "", "", fmt.Errorf("%s: an S3 URL is s3://bucket/key", redactURL(url))
	}
	return bucket, key, nil
}

// filePath returns the path of a file:// URL.
func filePath(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("open %s: %w", redactURL(raw), err)
	}
	if u.User != nil {
		return "", fmt.Errorf("open %s: a file URL holds no user or password", redactURL(raw))
	}
	if u.Host != "" && u.Host != "localhost" {
		return "", fmt.Errorf("open %s: a file URL names a local path (file:///path), not host %q", redactURL(raw), u.Host)
	}
	if u.Path == "" {
		return "", fmt.Errorf("open %s: no path", redactURL(raw))
	}
	return u.Path, nil
}

// redactURL returns raw without userinfo and with the query (which may
// hold a signature) elided, for names and messages.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		// Unparseable: keep the scheme only, as the rest may hold
		// credentials.
		if scheme, _, ok := splitScheme(raw); ok {
			return scheme + "://…"
		}
		return "(unparseable URL)"
	}
	u.User = nil
	if u.RawQuery != "" {
		u.RawQuery = "…"
	}
	u.Fragment, u.RawFragment = "", ""
	return u.String()
}

// StdinLocation is the location argument that stands for a location read
// from standard input (ReadLocation): a URL that holds a secret, such as a
// presigned one, then never appears in the process's command line, which
// every local user can read (/proc/PID/cmdline).
const StdinLocation = "-"

// maxLocationBytes bounds a location read by ReadLocation.
const maxLocationBytes = 64 << 10

// ReadLocation reads a location from r: its first line, without
// surrounding space, at most 64 KiB.
func ReadLocation(r io.Reader) (string, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxLocationBytes+1))
	if err != nil {
		return "", fmt.Errorf("reading the location from standard input: %w", err)
	}
	if len(b) > maxLocationBytes {
		return "", fmt.Errorf("the location on standard input is longer than %d bytes", maxLocationBytes)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	line = strings.TrimSpace(line)
	if line == "" {
		return "", errors.New("no location on standard input (SRC '-' reads it from there: a path or URL on the first line)")
	}
	return line, nil
}
