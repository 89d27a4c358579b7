package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/ffcvfs/ffcvfs/internal/toxitest"
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

// proxiedUpload is an upload fixture whose requests go through a
// toxiproxy in front of versitygw, with short timeouts: attempts stall
// after 500 ms, each request ends within 3 s, retries included.
func proxiedUpload(t *testing.T) (*s3Fixture, *toxitest.Proxy) {
	t.Helper()
	f := newS3Fixture(t, 1)
	tp := toxitest.Start(t)
	p := tp.Proxy(t, "s3", strings.TrimPrefix(f.srv.Endpoint(), "http://"))
	f.opts.Endpoint = "http://" + p.Addr()
	f.opts.AttemptTimeout = 500 * time.Millisecond
	f.opts.UploadDeadline = 3 * time.Second
	f.opts.MaxRetries = 2
	f.opts.Parallel = 2
	return f, p
}

// stall makes the proxy take every byte and pass none, both ways (the
// timeout toxic without a timeout), until the toxics stall-up and
// stall-down are removed.
func stall(t *testing.T, p *toxitest.Proxy) {
	for _, dir := range []string{"up", "down"} {
		p.AddToxic(t, toxitest.Toxic{Name: "stall-" + dir, Type: "timeout", Stream: dir + "stream", Attributes: map[string]int64{"timeout": 0}})
	}
}

// waitLog waits until the fixture's log holds s, or fails the test after
// a minute (a hang).
func waitLog(t *testing.T, f *s3Fixture, s string) {
	t.Helper()
	stop := time.After(time.Minute)
	for {
		ch := f.logs.Written()
		if strings.Contains(f.logs.String(), s) {
			return
		}
		select {
		case <-ch:
		case <-stop:
			t.Fatalf("the log never said %q:\n%s", s, f.logs)
		}
	}
}

// commitInBackground writes body and commits head in a goroutine; the
// channel gives the first error.
func commitInBackground(u *S3Upload, head, body []byte) <-chan error {
	done := make(chan error, 1)
	go func() {
		if _, err := u.Write(body); err != nil {
			done <- withAbort(err, u.Abort())
			return
		}
		done <- u.Commit(head)
	}()
	return done
}

// waitErr waits for an upload's error, failing the test after two minutes
// (a hang: the deadlines are seconds).
func waitErr(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(2 * time.Minute):
		t.Fatal("the upload did not end")
		return nil
	}
}

// TestS3UploadStalled: an endpoint that stops answering mid-upload (the
// timeout toxic: it takes bytes and sends none) ends the write with a
// sentence that names the part and the stall, within the upload deadline,
// where it hung for ever. When the endpoint answers again by the time the
// upload is aborted, no upload is left; when it does not, the error says
// which upload is left and how to remove it.
func TestS3UploadStalled(t *testing.T) {
	body := randomBytes(minPartSize+3*uploadPartSize, 9)
	t.Run("recovers for the abort", func(t *testing.T) {
		f, p := proxiedUpload(t)
		u, err := CreateS3(context.Background(), testBucket, "stalled", f.opts)
		if err != nil {
			t.Fatal(err)
		}
		stall(t, p)
		done := commitInBackground(u, []byte("head"), body)
		waitLog(t, f, "aborting the upload")
		p.RemoveToxic(t, "stall-up")
		p.RemoveToxic(t, "stall-down")
		err = waitErr(t, done)
		t.Log(err)
		for _, want := range []string{"writing s3://betons/stalled: part ", "request stalled: nothing received for 500ms"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("error %v; want one with %q", err, want)
			}
		}
		var ae *AbortError
		if errors.As(err, &ae) {
			t.Errorf("the abort failed: %v", ae)
		}
		if ls := openUploads(t, f); len(ls) != 0 {
			t.Errorf("uploads left open: %v", ls)
		}
	})
	t.Run("stays stalled", func(t *testing.T) {
		f, p := proxiedUpload(t)
		u, err := CreateS3(context.Background(), testBucket, "stalled", f.opts)
		if err != nil {
			t.Fatal(err)
		}
		stall(t, p)
		err = waitErr(t, commitInBackground(u, []byte("head"), body))
		t.Log(err)
		var ae *AbortError
		if !errors.As(err, &ae) || ae.UploadID == "" || !strings.Contains(err.Error(), "--upload-id "+ae.UploadID) {
			t.Fatalf("error %v; want one naming the upload left", err)
		}
		p.RemoveToxic(t, "stall-up")
		p.RemoveToxic(t, "stall-down")
		out, lerr := f.srv.Client().ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: aws.String(testBucket)})
		if lerr != nil || len(out.Uploads) != 1 || aws.ToString(out.Uploads[0].UploadId) != ae.UploadID {
			t.Fatalf("uploads left: %v (%v); want the one named, %s", out, lerr, ae.UploadID)
		}
		if _, err := f.srv.Client().AbortMultipartUpload(context.Background(), &s3.AbortMultipartUploadInput{
			Bucket: aws.String(testBucket), Key: aws.String("stalled"), UploadId: aws.String(ae.UploadID)}); err != nil {
			t.Fatal(err)
		}
	})
}

// TestS3UploadRefused: an endpoint that refuses connections mid-upload
// ends the write with the part and the cause (it said "context
// canceled"), and an abort made once it is back leaves nothing.
func TestS3UploadRefused(t *testing.T) {
	f, p := proxiedUpload(t)
	// Attempts enough that the abort, which begins when the part fails,
	// is still retrying when the endpoint is back: with 3, refused at
	// once, it could spend them all (in 11 ms) before this test, on a
	// busy machine, enabled the proxy again.
	f.opts.MaxRetries = 40
	u, err := CreateS3(context.Background(), testBucket, "refused", f.opts)
	if err != nil {
		t.Fatal(err)
	}
	p.Disable(t)
	done := commitInBackground(u, []byte("head"), randomBytes(minPartSize+3*uploadPartSize, 10))
	waitLog(t, f, "aborting the upload")
	p.Enable(t)
	err = waitErr(t, done)
	t.Log(err)
	for _, want := range []string{"writing s3://betons/refused: part ", "connection refused"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v; want one with %q", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), "context canceled") {
		t.Errorf("error %v hides its cause", err)
	}
	if ls := openUploads(t, f); len(ls) != 0 {
		t.Errorf("uploads left open: %v", ls)
	}
}

// TestS3UploadBounds: a head that would not fit one S3 part (a beton of
// some 130 million samples) is refused at Reserve, before anything is
// sent, where it failed at Complete after the whole upload; the parts
// reach S3's largest object while none is over 1 GiB, and the parts in
// flight hold at most 256 MiB or one part (they were five of 4 GiB past
// 4 TB).
func TestS3UploadBounds(t *testing.T) {
	f := newS3Fixture(t, 1)
	u, err := CreateS3(context.Background(), testBucket, "huge", f.opts)
	if err != nil {
		t.Fatal(err)
	}
	err = u.Reserve(5 << 30)
	if err == nil || !strings.Contains(err.Error(), "more than the 5363466240 (5 GiB less 5 MiB) an S3 part holds") {
		t.Errorf("a head of 5 GiB: %v", err)
	}
	if err := u.Abort(); err != nil {
		t.Fatal(err)
	}
	if maxUploadSize < 5<<40 {
		t.Errorf("the largest upload is %d bytes, less than S3's 5 TiB", maxUploadSize)
	}
	size := uploadPartSize
	for n := 2; n <= maxUploadParts; n++ {
		if size > maxPartSize {
			t.Fatalf("part %d has %d bytes", n, size)
		}
		for _, parallel := range []int{1, 4, 64} {
			if k := partSlots(size, parallel); k < 1 || k > parallel || k < parallel && parallel/k*size > max(uploadMemory, size) {
				t.Fatalf("a part of %d bytes takes %d of %d slots", size, k, parallel)
			}
		}
		if (n-1)%partsPerDoubling == 0 && size < maxPartSize {
			size *= 2
		}
	}
}
