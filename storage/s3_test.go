package storage

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/ffcvfs/ffcvfs/internal/s3test"
	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

// s3Fixture is a versitygw with one bucket and one object, the AWS
// environment pointing at it, and a logger whose output the test checks
// for the secret key at the end.
type s3Fixture struct {
	srv  *s3test.Server
	data []byte
	logs *testenv.OutputBuffer
	opts Options
}

const (
	testBucket = "betons"
	testKey    = "train/data.beton"
	testURL    = "s3://" + testBucket + "/" + testKey
)

func newS3Fixture(t *testing.T, size int) *s3Fixture {
	t.Helper()
	srv := s3test.Start(t)
	srv.Setenv(t)
	srv.CreateBucket(t, testBucket)
	data := randomBytes(size, uint64(size))
	srv.PutObject(t, testBucket, testKey, data)
	log, logs := captureLogger()
	f := &s3Fixture{srv: srv, data: data, logs: logs, opts: Options{
		Logger:         log,
		PartSize:       1 << 20,
		Parallel:       4,
		AttemptTimeout: 10 * time.Second,
		ReadDeadline:   30 * time.Second,
		MaxRetries:     4,
		BackoffBase:    time.Millisecond,
		BackoffMax:     20 * time.Millisecond,
	}}
	t.Cleanup(func() {
		if strings.Contains(logs.String(), srv.SecretKey()) {
			t.Errorf("the log shows the secret key:\n%s", logs)
		}
	})
	return f
}

// checkNoSecret fails when err shows the secret key.
func (f *s3Fixture) checkNoSecret(t *testing.T, err error) {
	t.Helper()
	if err != nil && strings.Contains(err.Error(), f.srv.SecretKey()) {
		t.Errorf("error shows the secret key: %v", err)
	}
}

func (f *s3Fixture) open(t *testing.T, url string) Source {
	t.Helper()
	src, err := Open(context.Background(), url, f.opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return src
}

func TestS3SourceRandomRanges(t *testing.T) {
	f := newS3Fixture(t, 20<<20)
	src := f.open(t, testURL)
	if _, ok := src.(*S3Source); !ok || src.Name() != testURL || src.Size() != int64(len(f.data)) {
		t.Fatalf("%T %q size %d", src, src.Name(), src.Size())
	}
	checkReadAt(t, src, f.data, make([]byte, len(f.data)), 0)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			for range 10 {
				off := rng.Int64N(int64(len(f.data)) + 10)
				n := 1 + rng.IntN(3<<20)
				if g == 0 {
					n = 1 + rng.IntN(5000)
				}
				p := make([]byte, n)
				got, err := src.ReadAt(context.Background(), p, off)
				want := max(0, min(n, len(f.data)-int(off)))
				if got != want || (got < n) != (err != nil) ||
					got > 0 && !bytes.Equal(p[:got], f.data[off:off+int64(got)]) {
					t.Errorf("ReadAt(%d at %d) = %d, %v; want %d bytes", n, off, got, err, want)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestS3SourceDirectGET: ranges come as plain signed GETs, byte-exact for
// keys that need escaping, and the same as the SDK's GetObject gives.
func TestS3SourceDirectGET(t *testing.T) {
	f := newS3Fixture(t, 1000)
	for _, key := range []string{"a b/c+d=e&f.beton", "ünï/cödé~(1)*!.beton", "x/%41%2F;,$@.beton"} {
		t.Run(key, func(t *testing.T) {
			data := randomBytes(300<<10, uint64(len(key)))
			f.srv.PutObject(t, testBucket, key, data)
			src := f.open(t, "s3://"+testBucket+"/"+key).(*S3Source)
			if src.url == "" {
				t.Fatal("reads go through GetObject, not direct GETs")
			}
			checkReadAt(t, src, data, make([]byte, len(data)), 0)
			checkReadAt(t, src, data, make([]byte, 1234), 5678)
			src.url = "" // GetObject
			checkReadAt(t, src, data, make([]byte, 1234), 5678)
		})
	}
}

// TestS3SourceDirectGETDenied: a refused GET is not retried and says S3's
// error code, without the secret key.
func TestS3SourceDirectGETDenied(t *testing.T) {
	f := newS3Fixture(t, 1000)
	src := f.open(t, testURL).(*S3Source)
	src.creds = credentials.NewStaticCredentialsProvider(f.srv.AccessKey(), "not-"+f.srv.SecretKey(), "")
	n, err := src.ReadAt(context.Background(), make([]byte, 100), 0)
	if n != 0 || err == nil {
		t.Fatalf("ReadAt = %d, %v; want an error", n, err)
	}
	t.Logf("error: %v", err)
	for _, s := range []string{testURL, "HTTP 403", "SignatureDoesNotMatch"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
	if strings.Contains(f.logs.String(), "retrying") {
		t.Errorf("a refused request was retried:\n%s", f.logs)
	}
	f.checkNoSecret(t, err)
}

// TestS3SourceConfiguration: the endpoint and credentials may come from
// options, from the environment, or from a profile of the shared files.
func TestS3SourceConfiguration(t *testing.T) {
	f := newS3Fixture(t, 1000)
	read := func(t *testing.T, opts Options) {
		t.Helper()
		src, err := Open(context.Background(), testURL, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close()
		checkReadAt(t, src, f.data, make([]byte, 1000), 0)
	}
	t.Run("environment", func(t *testing.T) {
		read(t, f.opts) // AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...
	})
	t.Run("options", func(t *testing.T) {
		t.Setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1") // explicit options win
		t.Setenv("AWS_REGION", "eu-west-3")
		opts := f.opts
		opts.Endpoint, opts.Region, opts.PathStyle = f.srv.Endpoint(), s3test.Region, true
		read(t, opts)
	})
	t.Run("profile", func(t *testing.T) {
		for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION"} {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
		opts := f.opts
		opts.Profile = s3test.Profile
		read(t, opts)
	})
}

func TestS3SourceReplacedObjectIsChanged(t *testing.T) {
	f := newS3Fixture(t, 3<<20)
	src := f.open(t, testURL)
	etag := src.(*S3Source).ETag()
	checkReadAt(t, src, f.data, make([]byte, 1000), 0)
	newETag := f.srv.PutObject(t, testBucket, testKey, randomBytes(3<<20, 99))
	n, err := src.ReadAt(context.Background(), make([]byte, 3<<20), 0)
	if !errors.Is(err, ErrChanged) || n != 0 {
		t.Fatalf("ReadAt = %d, %v; want 0, ErrChanged", n, err)
	}
	t.Logf("error: %v", err)
	for _, s := range []string{testURL, "opened with ETag " + etag, "now has " + newETag} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
	if strings.Contains(f.logs.String(), "retrying") {
		t.Errorf("a changed object was retried:\n%s", f.logs)
	}
}

func TestS3SourceServerStopped(t *testing.T) {
	f := newS3Fixture(t, 2<<20)
	f.opts.ReadDeadline = 1500 * time.Millisecond
	f.opts.MaxRetries = 1000
	src := f.open(t, testURL)
	checkReadAt(t, src, f.data, make([]byte, 2<<20), 0)

	f.srv.Stop()
	n, err := src.ReadAt(context.Background(), make([]byte, 2<<20), 0)
	if !errors.Is(err, ErrUnavailable) || n != 0 {
		t.Fatalf("ReadAt = %d, %v; want 0, ErrUnavailable", n, err)
	}
	t.Logf("error: %v", err)
	for _, s := range []string{testURL + ": bytes", "read deadline of 1.5s", "attempts over"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
	f.checkNoSecret(t, err)
	checkGaveUpEarly(t, err, 1000)

	f.srv.Restart(t)
	checkReadAt(t, src, f.data, make([]byte, 2<<20), 0)
}

func TestS3SourceOpenErrors(t *testing.T) {
	f := newS3Fixture(t, 1000)
	for _, tc := range []struct {
		url  string
		want string
	}{
		{"s3://" + testBucket + "/missing.beton", `no object "missing.beton" in bucket "betons"`},
		{"s3://no-such-bucket/x.beton", `bucket "no-such-bucket" does not exist`},
	} {
		_, err := Open(context.Background(), tc.url, f.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want+" at http://") || !strings.Contains(err.Error(), "open "+tc.url) {
			t.Errorf("Open(%s) = %v, want an error saying %q at the endpoint", tc.url, err, tc.want)
		}
		// One sentence: not the SDK's dump, which says "https response
		// error" of an http:// endpoint and gives request and host ids.
		if err != nil && (strings.Contains(err.Error(), "RequestID") || strings.Contains(err.Error(), "https response error")) {
			t.Errorf("Open(%s): %v; want no SDK dump", tc.url, err)
		}
		if errors.Is(err, ErrUnavailable) {
			t.Errorf("Open(%s): %v is not ErrUnavailable", tc.url, err)
		}
		f.checkNoSecret(t, err)
	}
	if strings.Contains(f.logs.String(), "retrying") {
		t.Errorf("a missing object was retried:\n%s", f.logs)
	}
	t.Run("wrong secret", func(t *testing.T) {
		t.Setenv("AWS_SECRET_ACCESS_KEY", "not-"+f.srv.SecretKey())
		_, err := Open(context.Background(), testURL, f.opts)
		if err == nil || !strings.Contains(err.Error(), "access denied") {
			t.Errorf("err = %v, want access denied", err)
		}
		f.checkNoSecret(t, err)
	})
	t.Run("no endpoint", func(t *testing.T) {
		opts := f.opts
		opts.Endpoint = "http://127.0.0.1:1"
		opts.ReadDeadline = 300 * time.Millisecond
		_, err := Open(context.Background(), testURL, opts)
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "open "+testURL) {
			t.Errorf("err = %v, want ErrUnavailable naming the object", err)
		}
		f.checkNoSecret(t, err)
	})
}
