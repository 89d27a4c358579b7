package storage

import (
	"context"
	"crypto/tls"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/logging"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// S3Source reads an S3 object (or one of an S3-compatible store) with
// ranged GetObject requests, each with If-Match on the ETag learnt at open,
// so a replaced object gives ErrChanged, never bytes of two versions. The
// SDK's own retries are off: the retry policy of Options applies. It
// is safe for concurrent use.
//
// The SDK loads the configuration and credentials, resolves the object's
// URL (endpoint, addressing style) and sends HeadObject; the ranged GETs
// themselves are plain HTTP requests signed with SigV4 by getSigner, a
// GET-only signer checked against the SDK's (see its doc for why).
// The SDK's GetObject runs some forty middleware steps per call, about
// half the client's CPU time per request on small ranges (measured: 110 µs
// of 240 µs for 27 KB ranges), and a mount that reads one range per
// image sends thousands per second. Where a URL cannot be learnt that way
// (S3 Express directory buckets sign with session keys), GetObject is
// used.
type S3Source struct {
	// Immutable after OpenS3.
	r      *netReader
	client *s3.Client
	bucket string
	key    string
	etag   string

	// The direct GET path; url is "" where GetObject is used.
	url    string
	host   string     // url's host, as signed
	path   string     // url's escaped path, as the request line has it
	gets   *getClient // nil: hc sends the GETs
	hc     aws.HTTPClient
	creds  aws.CredentialsProvider // nil: anonymous
	signer *getSigner
	region string
}

// emptySHA256 is the SHA-256 of an empty payload, in hex.
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

var (
	_ Source         = (*S3Source)(nil)
	_ RequestCounter = (*S3Source)(nil)
)

func init() {
	Register(Scheme{Names: []string{"s3"}, Form: "s3://bucket/key", Network: true,
		Open: func(ctx context.Context, url string, opts Options) (Source, error) {
			_, rest, _ := splitScheme(url)
			bucket, key, err := s3Object(url, rest)
			if err != nil {
				return nil, fmt.Errorf("open %w", err)
			}
			s, err := OpenS3(ctx, bucket, key, opts)
			if err != nil {
				return nil, err // not a nil *S3Source in a non-nil Source
			}
			return s, nil
		}})
}

// OpenS3 opens s3://bucket/key. Configuration and credentials come from
// opts first, then from the standard AWS environment variables and shared
// config files. A HeadObject learns the size and ETag; a missing bucket or
// key, or denied access, fails at once with a clear error.
func OpenS3(ctx context.Context, bucket, key string, opts Options) (*S3Source, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	name := "s3://" + bucket + "/" + key
	client, err := newS3Client(ctx, &opts, aws.NopRetryer{})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	s := &S3Source{
		r:      newNetReader(name, &opts),
		client: client,
		bucket: bucket,
		key:    key,
	}
	s.r.fetch = s.fetch
	octx, cancel := s.r.withDeadline(ctx)
	defer cancel()
	if err := s.r.policy.do(octx, "open "+name, s.head); err != nil {
		s.Close()
		return nil, err
	}
	if !strings.HasSuffix(bucket, "--x-s3") {
		s.direct(ctx, &opts)
	}
	if s.etag == "" {
		opts.Logger.Warn("S3 sends no ETag for the object: a replacement during reads can only be detected by its size",
			"source", name)
	}
	return s, nil
}

// newS3Client makes an S3 client from opts, the AWS environment and config
// files, with retryer.
func newS3Client(ctx context.Context, opts *Options, retryer aws.Retryer) (*s3.Client, error) {
	// The SDK's buildable client, so that AWS_CA_BUNDLE and the like still
	// apply, with our transport settings.
	hc := awshttp.NewBuildableClient().
		WithTransportOptions(tuneTransport(opts)).
		WithDialerOptions(func(d *net.Dialer) { d.Timeout = min(opts.AttemptTimeout, 30*time.Second) })
	lo := []func(*config.LoadOptions) error{
		config.WithHTTPClient(hc),
		config.WithRetryer(func() aws.Retryer { return retryer }),
		config.WithLogger(sdkLogger{opts.Logger}),
		config.WithClientLogMode(0),
	}
	if opts.Region != "" {
		lo = append(lo, config.WithRegion(opts.Region))
	}
	if opts.Profile != "" {
		lo = append(lo, config.WithSharedConfigProfile(opts.Profile))
	}
	cfg, err := config.LoadDefaultConfig(ctx, lo...)
	if err != nil {
		return nil, fmt.Errorf("AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	return s3.NewFromConfig(cfg, func(o *s3.Options) {
		if opts.Endpoint != "" {
			o.BaseEndpoint = aws.String(opts.Endpoint)
		}
		o.UsePathStyle = opts.PathStyle || (o.BaseEndpoint != nil && isLocalEndpoint(*o.BaseEndpoint))
		o.Retryer = retryer
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
		o.DisableLogOutputChecksumValidationSkipped = true
		o.ClientLogMode = 0
	}), nil
}

// direct sets up plain signed GETs: the object's URL is that of a
// presigned GetObject without its query. Where presigning fails, reads
// keep to GetObject.
func (s *S3Source) direct(ctx context.Context, opts *Options) {
	pre, err := s3.NewPresignClient(s.client).PresignGetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &s.key})
	if err != nil {
		return
	}
	u, err := url.Parse(pre.URL)
	if err != nil {
		return
	}
	u.RawQuery = ""
	o := s.client.Options()
	s.url = u.String()
	s.host = u.Host
	s.path = u.EscapedPath()
	if s.path == "" {
		s.path = "/"
	}
	s.hc = o.HTTPClient
	var base *tls.Config
	if bc, ok := s.hc.(*awshttp.BuildableClient); ok {
		base = bc.GetTransport().TLSClientConfig
	}
	s.gets = newGetClient(u, base, min(opts.AttemptTimeout, 30*time.Second), max(16, opts.Parallel*4, opts.Concurrent))
	s.creds = o.Credentials
	if s.creds != nil && aws.IsCredentialsProvider(s.creds, (*aws.AnonymousCredentials)(nil)) {
		s.creds = nil
	}
	s.region = o.Region
	s.signer = &getSigner{region: o.Region}
}

// isLocalEndpoint reports whether an endpoint URL names an IP address or
// localhost, where only path-style addressing works.
func isLocalEndpoint(endpoint string) bool {
	u, err := url.Parse(endpoint)
	if err != nil {
		return false
	}
	h := u.Hostname()
	return h == "localhost" || strings.HasSuffix(h, ".localhost") || net.ParseIP(h) != nil
}

// head learns size and ETag.
func (s *S3Source) head(ctx context.Context, progress func()) error {
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: &s.key})
	if err != nil {
		return s.openError(ctx, err)
	}
	progress()
	if out.ContentLength == nil {
		return permanent(errors.New("HeadObject gave no Content-Length"))
	}
	s.r.size = *out.ContentLength
	s.etag = aws.ToString(out.ETag)
	return nil
}

// openError turns a failed HeadObject into an error that says what is
// wrong: a HEAD response has no body, so a 404 is told apart by asking for
// the bucket.
func (s *S3Source) openError(ctx context.Context, err error) error {
	err = s.classify(err)
	switch httpStatus(err) {
	case http.StatusNotFound:
		// The sentence says it all; the SDK's dump (request and host ids,
		// "https response error" on any endpoint) stays out of it.
		if _, berr := s.client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &s.bucket}); httpStatus(berr) == http.StatusNotFound {
			return permanent(said{fmt.Sprintf("bucket %q does not exist at %s", s.bucket, s.endpointName()), err})
		}
		return permanent(said{fmt.Sprintf("no object %q in bucket %q at %s", s.key, s.bucket, s.endpointName()), err})
	case http.StatusForbidden:
		return permanent(fmt.Errorf("%s: %w", accessDenied, err))
	case http.StatusMovedPermanently:
		return permanent(fmt.Errorf("the bucket is in another region than %q: set the region: %w", s.client.Options().Region, err))
	case http.StatusBadRequest:
		return permanent(fmt.Errorf("bad request (a wrong region or endpoint?): %w", err))
	}
	return err
}

// said is an error whose message is a sentence of its own, wrapping the
// SDK's error (for errors.Is and As) without repeating its text.
type said struct {
	msg string
	err error
}

func (e said) Error() string { return e.msg }
func (e said) Unwrap() error { return e.err }

// endpointName is where the requests go: the endpoint's URL, or AWS S3.
func (s *S3Source) endpointName() string {
	if ep := s.client.Options().BaseEndpoint; ep != nil && *ep != "" {
		return *ep
	}
	return "AWS S3 (" + s.client.Options().Region + ")"
}

// accessDenied says what an S3 403 means.
const accessDenied = "access denied (check the credentials, the region and the bucket policy)"

// httpStatus returns the HTTP status of a failed S3 call, or 0.
func httpStatus(err error) int {
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// classify marks SDK errors that retrying cannot fix as permanent: only
// failures to send, 408, 429 and 5xx responses, and stalls are retried.
// Everything else (no credentials, an invalid bucket name, 4xx) fails at
// once.
func (s *S3Source) classify(err error) error { return classifyS3(err) }

// classifyS3 is S3Source.classify, for any S3 call.
func classifyS3(err error) error {
	var se *smithyhttp.RequestSendError
	var re *smithyhttp.ResponseError
	switch {
	case errors.Is(err, errStalled), errors.As(err, &se):
		return err
	case errors.As(err, &re):
		return err // retryable() decides by status
	}
	return permanent(err)
}

// fetch is one attempt at dst = bytes [off, off+len(dst)).
func (s *S3Source) fetch(ctx context.Context, dst []byte, off int64, progress func()) error {
	if s.url != "" {
		return s.fetchDirect(ctx, dst, off, progress)
	}
	end := off + int64(len(dst)) - 1
	in := &s3.GetObjectInput{
		Bucket: &s.bucket,
		Key:    &s.key,
		Range:  aws.String(rangeField(off, end)),
	}
	if s.etag != "" {
		in.IfMatch = &s.etag
	}
	out, err := s.client.GetObject(ctx, in)
	if err != nil {
		var ae smithy.APIError
		switch st := httpStatus(err); {
		case st == http.StatusPreconditionFailed || errors.As(err, &ae) && ae.ErrorCode() == "PreconditionFailed":
			return s.changed(ctx, "S3 answered 412 Precondition Failed")
		case st == http.StatusRequestedRangeNotSatisfiable:
			return s.changed(ctx, "the range is past the object's end now")
		}
		return s.classify(err)
	}
	defer out.Body.Close()
	progress()
	if et := aws.ToString(out.ETag); s.etag != "" && et != "" && et != s.etag {
		return fmt.Errorf("%w: a response carries another ETag; opened with ETag %s, S3 now has %s", ErrChanged, s.etag, et)
	}
	if err := s.r.checkContentRange(aws.ToString(out.ContentRange), off, end, "S3", changedSize); err != nil {
		return err
	}
	if n := aws.ToInt64(out.ContentLength); n != int64(len(dst)) {
		return permanent(fmt.Errorf("S3 sent Content-Length %d for a range of %d bytes", n, len(dst)))
	}
	return readFull(out.Body, dst, progress)
}

// fetchDirect is fetch as a plain signed GET.
func (s *S3Source) fetchDirect(ctx context.Context, dst []byte, off int64, progress func()) error {
	end := off + int64(len(dst)) - 1
	rng := rangeField(off, end)
	var fields [12]string
	f := append(fields[:0], "Range", rng)
	if s.etag != "" {
		f = append(f, "If-Match", s.etag)
	}
	if s.creds != nil {
		creds, err := s.creds.Retrieve(ctx)
		if err != nil {
			// They served HeadObject at open: a refresh that failed, which
			// another attempt may not.
			return fmt.Errorf("AWS credentials: %w", err)
		}
		stamp, auth := s.signer.signature(s.host, s.path, rng, s.etag, creds, time.Now())
		f = append(f, "X-Amz-Date", stamp, "X-Amz-Content-Sha256", emptySHA256, "Authorization", auth)
		if creds.SessionToken != "" {
			f = append(f, "X-Amz-Security-Token", creds.SessionToken)
		}
	}
	if s.gets == nil {
		return s.fetchHTTP(ctx, dst, off, end, f, progress)
	}
	resp, err := s.gets.get(ctx, s.path, f...)
	if err != nil {
		return err
	}
	defer resp.done()
	return s.ranged(ctx, resp.Response, dst, off, end, progress)
}

// fetchHTTP is fetchDirect through net/http, with the request's header
// fields (name, value pairs).
func (s *S3Source) fetchHTTP(ctx context.Context, dst []byte, off, end int64, fields []string, progress func()) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return permanent(fmt.Errorf("cannot build request: %v", stripURLError(err)))
	}
	req.Header = headerOf(fields)
	resp, err := s.hc.Do(req)
	if err != nil {
		return fmt.Errorf("GET: %w", stripURLError(err))
	}
	defer resp.Body.Close()
	return s.ranged(ctx, resp, dst, off, end, progress)
}

// ranged checks the answer to a ranged GET of bytes [off, end] and reads
// its body into dst.
func (s *S3Source) ranged(ctx context.Context, resp *http.Response, dst []byte, off, end int64, progress func()) error {
	progress()
	switch resp.StatusCode {
	case http.StatusPartialContent:
	case http.StatusPreconditionFailed:
		return s.changed(ctx, "S3 answered 412 Precondition Failed")
	case http.StatusRequestedRangeNotSatisfiable:
		return s.changed(ctx, "the range is past the object's end now")
	case http.StatusOK:
		return permanent(errors.New("S3 ignored the Range header (status 200)"))
	default:
		return s3StatusError(resp)
	}
	if et := resp.Header.Get("ETag"); s.etag != "" && et != "" && et != s.etag {
		return fmt.Errorf("%w: a response carries another ETag; opened with ETag %s, S3 now has %s", ErrChanged, s.etag, et)
	}
	if err := s.r.checkContentRange(resp.Header.Get("Content-Range"), off, end, "S3", changedSize); err != nil {
		return err
	}
	if resp.ContentLength != int64(len(dst)) {
		return permanent(fmt.Errorf("S3 sent Content-Length %d for a range of %d bytes", resp.ContentLength, len(dst)))
	}
	return readFull(resp.Body, dst, progress)
}

// changedSize is ErrChanged for an object whose size is another now.
func changedSize(why string) error { return fmt.Errorf("%w: %s", ErrChanged, why) }

// s3StatusError is the error of an unexpected status, with the S3 error
// code and message of the response's XML body where it has them.
func s3StatusError(resp *http.Response) error {
	se := newStatusError(resp)
	var body struct {
		Code    string `xml:"Code"`
		Message string `xml:"Message"`
	}
	if xml.NewDecoder(io.LimitReader(resp.Body, 16<<10)).Decode(&body) != nil || body.Code == "" {
		return se
	}
	msg := body.Code
	if body.Message != "" {
		msg += ": " + body.Message
	}
	return fmt.Errorf("%w: %s", se, msg)
}

// changed is ErrChanged naming both ETags, the current one learnt with a
// HeadObject (best effort).
func (s *S3Source) changed(ctx context.Context, why string) error {
	now := "(unknown)"
	if out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: &s.key}); err == nil {
		now = aws.ToString(out.ETag)
	} else if httpStatus(err) == http.StatusNotFound {
		now = "(deleted)"
	}
	return fmt.Errorf("%w: %s; opened with ETag %s, S3 now has %s", ErrChanged, why, s.etag, now)
}

// ReadAt reads len(p) bytes at off; see Source. A read larger than
// PartSize is fetched in parts, in parallel.
func (s *S3Source) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	return s.r.readAt(ctx, p, off)
}

// Size returns the object's size, as learnt at open.
func (s *S3Source) Size() int64 { return s.r.size }

// Name returns "s3://bucket/key".
func (s *S3Source) Name() string { return s.r.name }

// Identity returns the object's s3:// URL with its ETag and size, as
// learnt at open; "" without an ETag.
func (s *S3Source) Identity() string {
	if s.etag == "" {
		return ""
	}
	return fmt.Sprintf("%s etag=%s size=%d", s.r.name, s.etag, s.r.size)
}

// ETag returns the object's ETag, as learnt at open.
func (s *S3Source) ETag() string { return s.etag }

// Close cancels reads in flight and closes the idle connections of the
// ranged GETs. Later reads fail with an error matching os.ErrClosed. (The
// SDK client's idle connections close by themselves after 90 s: it cannot
// be told to close them.)
func (s *S3Source) Close() error {
	s.r.close()
	if s.gets != nil {
		s.gets.close()
	}
	return nil
}

// sdkLogger passes the SDK's own messages (warnings only: request logging is
// off, so nothing signed or secret) to slog.
type sdkLogger struct{ log *slog.Logger }

func (l sdkLogger) Logf(c logging.Classification, format string, v ...any) {
	level := slog.LevelInfo
	if c == logging.Warn {
		level = slog.LevelWarn
	}
	l.log.Log(context.Background(), level, "aws sdk: "+fmt.Sprintf(format, v...))
}

// RequestStats returns the failed attempts of the source's requests.
func (s *S3Source) RequestStats() RequestStats { return s.r.policy.counts.stats() }
