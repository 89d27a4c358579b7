package s3test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/s3"
)

func TestServerStoresObjectsAcrossRestart(t *testing.T) {
	srv := Start(t)
	if !strings.HasPrefix(srv.Endpoint(), "http://127.0.0.1:") {
		t.Errorf("endpoint %s", srv.Endpoint())
	}
	srv.CreateBucket(t, "bucket")
	data := bytes.Repeat([]byte("0123456789"), 1000)
	etag := srv.PutObject(t, "bucket", "dir/k", data)
	if etag == "" {
		t.Error("no ETag")
	}
	get := func() []byte {
		t.Helper()
		out, err := srv.Client().GetObject(context.Background(), &s3.GetObjectInput{Bucket: ptr("bucket"), Key: ptr("dir/k")})
		if err != nil {
			t.Fatal(err)
		}
		defer out.Body.Close()
		b, err := io.ReadAll(out.Body)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if !bytes.Equal(get(), data) {
		t.Fatal("object differs")
	}

	srv.Stop()
	if _, err := http.Get(srv.Endpoint()); err == nil {
		t.Error("the server answers after Stop")
	}
	srv.Stop() // twice is fine
	srv.Restart(t)
	if !bytes.Equal(get(), data) {
		t.Fatal("object differs after Restart")
	}
}

func TestServerEnvWorksForChildProcesses(t *testing.T) {
	srv := Start(t)
	env := strings.Join(srv.Env(), "\n")
	for _, want := range []string{
		"AWS_ACCESS_KEY_ID=" + srv.AccessKey(),
		"AWS_SECRET_ACCESS_KEY=" + srv.SecretKey(),
		"AWS_ENDPOINT_URL=" + srv.Endpoint(),
		"AWS_REGION=" + Region,
	} {
		if !strings.Contains(env, want) {
			t.Errorf("Env() lacks %s", want)
		}
	}
	// A child process: the shell sees the variables.
	cmd := exec.Command("sh", "-c", `test -n "$AWS_SECRET_ACCESS_KEY" && test -r "$AWS_CONFIG_FILE" && test -r "$AWS_SHARED_CREDENTIALS_FILE" && echo ok`)
	cmd.Env = srv.Env()
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Errorf("child: %v: %s", err, out)
	}
}

func ptr(s string) *string { return &s }
