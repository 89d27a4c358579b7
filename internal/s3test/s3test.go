package s3test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

// VersitygwModule is what `go install` installs when versitygw is missing.
const VersitygwModule = "github.com/versity/versitygw/cmd/versitygw@v1.8.0"

// Region is the region the server runs in.
const Region = "us-east-1"

// Profile is the profile that the config files of Env hold the server's
// credentials and endpoint under.
const Profile = "s3test"

// Server is a running versitygw.
type Server struct {
	// Immutable after Start.
	bin       string
	dataDir   string
	filesDir  string
	addr      string // 127.0.0.1:port
	accessKey string
	secretKey string
	client    *s3.Client

	mu sync.Mutex
	// Guarded by mu.
	proc *testenv.Daemon // the last one started
}

// Start starts versitygw on a free port of 127.0.0.1 and waits until it
// answers. t.Cleanup stops it.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := testenv.FindGoTool("versitygw", "FFCVFS_VERSITYGW")
	if bin == "" {
		testenv.Missing(t, "versitygw not found ($FFCVFS_VERSITYGW, PATH, $(go env GOPATH)/bin, ~/go/bin, /root/go/bin); install it with: go install %s",
			VersitygwModule)
		return nil
	}
	root := t.TempDir()
	s := &Server{
		bin:       bin,
		dataDir:   filepath.Join(root, "data"),
		filesDir:  filepath.Join(root, "aws"),
		accessKey: "S3TEST" + randomHex(7),
		secretKey: randomHex(20),
	}
	for _, d := range []string{s.dataDir, s.filesDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	for try := 0; try < 5; try++ {
		s.addr, err = testenv.FreeAddr()
		if err != nil {
			t.Fatalf("s3test: no free port: %v", err)
		}
		if err = s.start(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("s3test: %v", err)
	}
	t.Cleanup(s.Stop)
	if err := s.writeConfigFiles(); err != nil {
		t.Fatalf("s3test: %v", err)
	}
	s.client = s3.New(s3.Options{
		Region:       Region,
		BaseEndpoint: aws.String(s.Endpoint()),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(s.accessKey, s.secretKey, ""),
		Retryer:      aws.NopRetryer{},
	})
	return s
}

// Endpoint returns the server's URL, http://127.0.0.1:port.
func (s *Server) Endpoint() string { return "http://" + s.addr }

// AccessKey returns the access key id.
func (s *Server) AccessKey() string { return s.accessKey }

// SecretKey returns the secret access key.
func (s *Server) SecretKey() string { return s.secretKey }

// Client returns an S3 client of the server, with path-style addressing
// and no retries.
func (s *Server) Client() *s3.Client { return s.client }

// Env returns the environment (NAME=value) that points the AWS SDKs and CLI
// at the server: credentials, region, endpoint, and config files of its own
// that also hold them under the profile Profile, so the user's ~/.aws plays
// no part.
func (s *Server) Env() []string {
	return []string{
		"AWS_ACCESS_KEY_ID=" + s.accessKey,
		"AWS_SECRET_ACCESS_KEY=" + s.secretKey,
		"AWS_REGION=" + Region,
		"AWS_DEFAULT_REGION=" + Region,
		"AWS_ENDPOINT_URL=" + s.Endpoint(),
		"AWS_CONFIG_FILE=" + filepath.Join(s.filesDir, "config"),
		"AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(s.filesDir, "credentials"),
		"AWS_EC2_METADATA_DISABLED=true",
	}
}

// Setenv sets Env in this process for the duration of t, and unsets the
// other AWS variables that could get in the way (AWS_PROFILE,
// AWS_SESSION_TOKEN, ...).
func (s *Server) Setenv(t testing.TB) {
	t.Helper()
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "AWS_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
	for _, kv := range s.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
}

// writeConfigFiles writes the config and credentials files of Env.
func (s *Server) writeConfigFiles() error {
	cfg := fmt.Sprintf("[profile %s]\nregion = %s\nendpoint_url = %s\n", Profile, Region, s.Endpoint())
	creds := fmt.Sprintf("[%s]\naws_access_key_id = %s\naws_secret_access_key = %s\n", Profile, s.accessKey, s.secretKey)
	if err := os.WriteFile(filepath.Join(s.filesDir, "config"), []byte(cfg), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(s.filesDir, "credentials"), []byte(creds), 0o600)
}

// CreateBucket creates a bucket.
func (s *Server) CreateBucket(t testing.TB, bucket string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket}); err != nil {
		t.Fatalf("s3test: create bucket %s: %v", bucket, err)
	}
}

// PutObject stores data as bucket/key, replacing any object there, and
// returns its ETag.
func (s *Server) PutObject(t testing.TB, bucket, key string, data []byte) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket:        &bucket,
		Key:           &key,
		Body:          bytes.NewReader(data),
		ContentLength: aws.Int64(int64(len(data))),
	})
	if err != nil {
		t.Fatalf("s3test: put s3://%s/%s: %v", bucket, key, err)
	}
	return aws.ToString(out.ETag)
}

// Stop stops the server (SIGTERM, then SIGKILL after 5 s). Its data stays
// for Restart. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.proc.Stop()
	}
}

// Restart starts a stopped server again, on the same address with the same
// data and credentials, and waits until it answers. It stops a running one
// first.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	// The port was ours a moment ago; wait a little if another socket
	// still holds it.
	var err error
	for try := 0; try < 20; try++ {
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("s3test: restart: %v", err)
}

// Output returns what versitygw printed so far, for failure messages.
func (s *Server) Output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return ""
	}
	return s.proc.Output()
}

// start runs versitygw on s.addr and waits until it answers HTTP.
func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Keep-alive, as S3 does (versitygw closes every connection after one
	// response by default), so that connections are reused as they would
	// be with S3.
	cmd := exec.Command(s.bin,
		"--port", s.addr,
		"--keep-alive",
		"--access", s.accessKey,
		"--secret", s.secretKey,
		"--region", Region,
		"--quiet",
		"posix", s.dataDir)
	cmd.Env = cleanEnv()
	client := &http.Client{Timeout: time.Second}
	proc, err := testenv.StartDaemon("versitygw on "+s.addr, cmd, func() error {
		resp, err := client.Get(s.Endpoint() + "/")
		if err == nil {
			resp.Body.Close()
		}
		return err
	})
	if err != nil {
		return err
	}
	s.proc = proc
	return nil
}

// cleanEnv is this process's environment without the variables versitygw
// reads its settings from, so that only the command line counts.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "VGW_") || strings.HasPrefix(k, "ROOT_") || strings.HasPrefix(k, "AWS_") ||
			k == "LOGFILE" || k == "WEBHOOK" {
			continue
		}
		env = append(env, kv)
	}
	return env
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return strings.ToUpper(hex.EncodeToString(b))
}
