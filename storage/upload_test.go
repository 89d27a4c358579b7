package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// getObject returns the object's bytes, or the error.
func getObject(t *testing.T, f *s3Fixture, key string) ([]byte, error) {
	t.Helper()
	out, err := f.srv.Client().GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String(testBucket), Key: &key})
	if err != nil {
		return nil, err
	}
	defer out.Body.Close()
	return io.ReadAll(out.Body)
}

// openUploads returns the keys of the bucket's incomplete uploads.
func openUploads(t *testing.T, f *s3Fixture) []string {
	t.Helper()
	out, err := f.srv.Client().ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: aws.String(testBucket)})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, u := range out.Uploads {
		keys = append(keys, aws.ToString(u.Key))
	}
	return keys
}

// TestS3Upload writes objects of several sizes as a beton's writer does
// (the bytes after the head in pieces, then the head) and reads them
// back: the same bytes, the head first, and no upload left open. Sizes
// cover one part, a part 1 that must wait for 5 MiB, and parts sent
// while writing, with the last one short.
func TestS3Upload(t *testing.T) {
	f := newS3Fixture(t, 1)
	for _, size := range []int{0, 1000, minPartSize - 1, minPartSize + 1, minPartSize + 2*uploadPartSize + 12345} {
		key := fmt.Sprintf("up/%d.beton", size)
		head := randomBytes(4096+size%100, uint64(size)+1)
		body := randomBytes(size, uint64(size)+2)
		f.opts.Parallel = 2
		u, err := Create(context.Background(), "s3://"+testBucket+"/"+key, f.opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := u.Reserve(int64(len(head))); err != nil {
			t.Fatal(err)
		}
		for p := body; len(p) > 0; {
			k := min(len(p), 3<<20+17)
			if _, err := u.Write(p[:k]); err != nil {
				t.Fatal(err)
			}
			p = p[k:]
		}
		if ls := openUploads(t, f); len(ls) != 1 {
			t.Errorf("size %d: uploads open while writing: %v, want one", size, ls)
		}
		if _, err := getObject(t, f, key); err == nil {
			t.Errorf("size %d: the object exists before Commit", size)
		}
		if err := u.Commit(head); err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		got, err := getObject(t, f, key)
		if err != nil {
			t.Fatal(err)
		}
		if want := append(head, body...); !bytes.Equal(got, want) {
			t.Errorf("size %d: object of %d bytes differs from the %d written", size, len(got), len(want))
		}
		if ls := openUploads(t, f); len(ls) != 0 {
			t.Errorf("size %d: uploads left open: %v", size, ls)
		}
	}
}

// TestS3UploadAbort: an upload aborted halfway (parts sent) or cancelled
// by its context leaves no object and no incomplete upload.
func TestS3UploadAbort(t *testing.T) {
	f := newS3Fixture(t, 1)
	body := randomBytes(minPartSize+2*uploadPartSize, 5)
	u, err := CreateS3(context.Background(), testBucket, "aborted", f.opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := u.Write(body); err != nil {
		t.Fatal(err)
	}
	if err := u.Abort(); err != nil {
		t.Fatal(err)
	}
	if err := u.Commit([]byte("head")); err == nil {
		t.Error("Commit after Abort succeeded")
	}
	ctx, cancel := context.WithCancel(context.Background())
	u, err = CreateS3(ctx, testBucket, "cancelled", f.opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := u.Write(body[:minPartSize+uploadPartSize]); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := u.Write(body); err == nil {
		if err := u.Commit([]byte("head")); err == nil {
			t.Error("a cancelled upload committed")
		}
	} else {
		u.Abort()
	}
	for _, key := range []string{"aborted", "cancelled"} {
		if _, err := getObject(t, f, key); err == nil {
			t.Errorf("%s: the object exists", key)
		}
	}
	if ls := openUploads(t, f); len(ls) != 0 {
		t.Errorf("uploads left open: %v", ls)
	}
}

// TestS3UploadErrors: a missing bucket fails at Create with a sentence;
// URLs that are not s3:// are refused.
func TestS3UploadErrors(t *testing.T) {
	f := newS3Fixture(t, 1)
	_, err := Create(context.Background(), "s3://no-such-bucket/x.beton", f.opts)
	if err == nil || !strings.Contains(err.Error(), "s3://no-such-bucket/x.beton") {
		t.Errorf("missing bucket: %v", err)
	}
	for _, url := range []string{"https://example.com/x.beton", "s3://bucket-only", "s3:///key", "ftp://h/x"} {
		if _, err := Create(context.Background(), url, f.opts); err == nil {
			t.Errorf("%s: no error", url)
		} else if errors.Is(err, context.Canceled) {
			t.Errorf("%s: %v", url, err)
		}
	}
}
