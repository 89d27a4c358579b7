package storage

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// sign sets on req, a GET with no query and no headers but Range and
// If-Match, the headers fetchDirect sends with g's signature.
func sign(g *getSigner, req *http.Request, creds aws.Credentials, t time.Time) {
	h := req.Header
	path := req.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	stamp, auth := g.signature(req.URL.Host, path, strings.TrimSpace(h.Get("Range")), strings.TrimSpace(h.Get("If-Match")), creds, t)
	h["X-Amz-Date"] = []string{stamp}
	h["X-Amz-Content-Sha256"] = []string{emptySHA256}
	if creds.SessionToken != "" {
		h["X-Amz-Security-Token"] = []string{creds.SessionToken}
	}
	h["Authorization"] = []string{auth}
}

// TestGetSignerMatchesSDK: for the GETs the mount makes, with and without
// If-Match and a session token, across a day's change and on paths that
// need escaping, the hand signer's headers are the SDK signer's.
func TestGetSignerMatchesSDK(t *testing.T) {
	sdk := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
	g := &getSigner{region: "eu-west-3"}
	for i, tc := range []struct {
		url, etag string
		creds     aws.Credentials
		at        time.Time
	}{
		{"https://bucket.s3.eu-west-3.amazonaws.com/train.beton", `"0123abcd"`, aws.Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"}, time.Date(2026, 11, 25, 23, 59, 59, 0, time.UTC)},
		{"https://bucket.s3.eu-west-3.amazonaws.com/train.beton", `"0123abcd"`, aws.Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"}, time.Date(2026, 11, 26, 0, 0, 1, 0, time.UTC)},
		{"http://127.0.0.1:7070/my-bucket/data%20sets/%C3%A9t%C3%A9/train%2Bval.beton", "", aws.Credentials{AccessKeyID: "user", SecretAccessKey: "secret", SessionToken: "FwoGZXIvYXdzEXAMPLE//token="}, time.Date(2027, 1, 2, 3, 4, 5, 0, time.FixedZone("CET", 3600))},
	} {
		mk := func() *http.Request {
			req, err := http.NewRequest(http.MethodGet, tc.url, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Range", "bytes=2097152-2123455")
			if tc.etag != "" {
				req.Header.Set("If-Match", tc.etag)
			}
			return req
		}
		want := mk()
		want.Header.Set("X-Amz-Content-Sha256", emptySHA256)
		if err := sdk.SignHTTP(context.Background(), tc.creds, want, emptySHA256, "s3", "eu-west-3", tc.at); err != nil {
			t.Fatal(err)
		}
		for range 3 { // the signer reuses its buffer and its key
			got := mk()
			sign(g, got, tc.creds, tc.at)
			for _, h := range []string{"Authorization", "X-Amz-Date", "X-Amz-Content-Sha256", "X-Amz-Security-Token"} {
				if got.Header.Get(h) != want.Header.Get(h) {
					t.Errorf("case %d: %s\n got %q\nwant %q", i, h, got.Header.Get(h), want.Header.Get(h))
				}
			}
		}
	}
}

func BenchmarkSignGET(b *testing.B) {
	creds := aws.Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "secret"}
	at := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	req, _ := http.NewRequest(http.MethodGet, "https://bucket.s3.eu-west-3.amazonaws.com/train.beton", nil)
	req.Header.Set("Range", "bytes=2097152-2123455")
	req.Header.Set("If-Match", `"0123abcd"`)
	b.Run("sdk", func(b *testing.B) {
		sdk := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
		for range b.N {
			sdk.SignHTTP(context.Background(), creds, req, emptySHA256, "s3", "eu-west-3", at)
		}
	})
	b.Run("get", func(b *testing.B) {
		g := &getSigner{region: "eu-west-3"}
		for range b.N {
			sign(g, req, creds, at)
		}
	})
}
