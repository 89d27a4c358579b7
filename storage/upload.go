package storage

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// Sizes of an upload's parts. S3 wants every part but the last to hold at
// least 5 MiB, at most 5 GiB, and at most 10,000 parts: parts start at
// 8 MiB and double every 700 up to 1 GiB, so that an upload reaches
// maxUploadSize (5.6 TiB, beyond S3's 5 TiB object), and the memory held
// stays bounded (see S3Upload).
const (
	minPartSize      = 5 << 20
	uploadPartSize   = 8 << 20
	partsPerDoubling = 700
	maxPartSize      = 1 << 30
	maxUploadParts   = 10000
	maxS3Part        = 5 << 30
	// uploadMemory bounds the bytes of the parts in flight, or one part
	// when it alone is more.
	uploadMemory = 256 << 20
	// partRate is the slowest rate an upload's deadline allows a part:
	// Options.UploadDeadline and a second for every partRate bytes.
	partRate = 8 << 20
	// abortDeadline bounds an abort, retries included (or
	// Options.UploadDeadline where it is shorter).
	abortDeadline = 30 * time.Second
)

// maxUploadSize is the largest object an S3Upload writes.
var maxUploadSize = func() int64 {
	var n int64
	size := int64(uploadPartSize)
	for p := 2; p <= maxUploadParts; p++ {
		n += size
		if (p-1)%partsPerDoubling == 0 && size < maxPartSize {
			size *= 2
		}
	}
	return n
}()

// S3Upload writes one S3 object by a multipart upload, in the two steps of
// a beton's writer: the bytes after the head, in order (Write), then the
// head (Commit). The head is part 1, sent last together with the first
// 5 MiB written (so that part 1 is as large as S3 wants every part but
// the last to be); the rest is sent in parts while it is written, a few at
// a time. The object appears only when CompleteMultipartUpload succeeds;
// Abort, or a failed Commit, aborts the upload, so that no object and no
// incomplete upload stays behind. An abort that fails (the endpoint is
// gone) is an *AbortError that names the upload, so that it can be
// removed. A writer killed with SIGKILL cannot abort: a lifecycle rule
// (AbortIncompleteMultipartUpload) on the bucket removes what it left.
//
// Every request runs under the read path's retry policy (Options): an
// attempt that sends or receives nothing for AttemptTimeout is cancelled
// and retried with backoff, up to MaxRetries times, and the request,
// retries included, ends by Options.UploadDeadline (and a second for
// every 8 MiB of a part), so that a stalled endpoint ends the write with a
// sentence instead of holding it for ever. The SDK's own retries are off.
// Every part carries its MD5 (Content-MD5), which S3 checks.
//
// Memory: the first 5 MiB, the part being filled, and the parts in flight:
// at most Options.Parallel of them, and of them at most 256 MiB, or one
// part when it alone is more (parts reach 1 GiB after 700 GiB).
type S3Upload struct {
	// Immutable after CreateS3.
	client      *s3.Client
	bucket, key string
	name        string
	id          string
	opts        Options
	log         *retryLog

	ctx    context.Context // ends when the upload fails, is aborted, or its caller's ctx ends
	cancel context.CancelCauseFunc
	slots  chan struct{} // one per Options.Parallel; a large part takes several

	// Used by the writing goroutine alone.
	first    []byte // the first bytes written, sent with the head
	cur      []byte // the part being filled
	partSize int
	next     int32 // the number of the next part sent while writing
	written  int64 // bytes given to Write
	ended    bool  // committed or aborted
	abortErr error // Abort's result, given again by later calls

	mu    sync.Mutex
	parts []types.CompletedPart // guarded by mu
	err   error                 // guarded by mu: the first part's failure
	wg    sync.WaitGroup
}

// errAborted ends an upload's context when Abort is called.
var errAborted = errors.New("the upload was aborted")

// AbortError is an upload that could not be aborted: its parts stay in the
// bucket (and are billed) until removed.
type AbortError struct {
	Name, Bucket, Key, UploadID string
	Err                         error
}

func (e *AbortError) Error() string {
	return fmt.Sprintf("aborting the upload of %s (upload id %s) failed: %v; its parts stay stored until removed: "+
		"aws s3api abort-multipart-upload --bucket %s --key %s --upload-id %s (or a lifecycle rule AbortIncompleteMultipartUpload on the bucket)",
		e.Name, e.UploadID, e.Err, e.Bucket, e.Key, e.UploadID)
}

func (e *AbortError) Unwrap() error { return e.Err }

// CreateS3 begins a multipart upload to s3://bucket/key. Configuration
// and credentials come as for OpenS3; a missing bucket or denied access
// fails at once.
func CreateS3(ctx context.Context, bucket, key string, opts Options) (*S3Upload, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	name := "s3://" + bucket + "/" + key
	client, err := newS3Client(ctx, &opts, aws.NopRetryer{})
	if err != nil {
		return nil, fmt.Errorf("writing %s: %w", name, err)
	}
	u := &S3Upload{
		client: client, bucket: bucket, key: key, name: name, opts: opts,
		log:      &retryLog{log: opts.Logger, seen: map[string]bool{}},
		partSize: uploadPartSize,
		next:     2,
		slots:    make(chan struct{}, opts.Parallel),
	}
	// A create that is retried after S3 made the first may leave that one
	// behind, as the SDK's retries would: a lifecycle rule removes it.
	err = u.request(ctx, "starting the upload", opts.UploadDeadline, opts.AttemptTimeout, func(ctx context.Context, progress func()) error {
		out, err := client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &bucket, Key: &key})
		if err != nil {
			return classifyS3(err)
		}
		u.id = aws.ToString(out.UploadId)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("writing %s: %w", name, uploadError(err))
	}
	opts.Logger.Debug("the upload began", "object", name, "upload_id", u.id)
	// A cancelled ctx stops the upload: parts in flight fail, and Commit
	// with them.
	u.ctx, u.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	context.AfterFunc(ctx, func() { u.cancel(context.Cause(ctx)) })
	return u, nil
}

// request runs call, one request of the upload, under the retry policy of
// the options: attempts that stall for stall are retried, and the whole
// ends by deadline.
func (u *S3Upload) request(ctx context.Context, what string, deadline, stall time.Duration, call attemptFunc) error {
	p := newRetryPolicy(&u.opts)
	p.attemptTimeout, p.deadline, p.deadlineName = stall, deadline, "upload deadline"
	p.log = u.log // one log of causes for the whole upload
	rctx, cancel := context.WithTimeoutCause(ctx, deadline, errReadDeadline)
	defer cancel()
	return p.do(rctx, what, call)
}

// uploadError says what a failed S3 call means, where its status tells.
func uploadError(err error) error {
	var nsu *types.NoSuchUpload
	switch {
	case errors.As(err, &nsu):
		return fmt.Errorf("the upload is gone (aborted by another client, or by a lifecycle rule): %w", err)
	case httpStatus(err) == 404:
		return fmt.Errorf("the bucket does not exist: %w", err)
	case httpStatus(err) == 403:
		return fmt.Errorf("%s: %w", accessDenied, err)
	}
	return err
}

// Name returns the object's URL.
func (u *S3Upload) Name() string { return u.name }

// Reserve checks that a head of n bytes fits part 1 with the first 5 MiB
// written: a beton of some 130 million samples has a larger one, which
// would fail only at the end, after the whole upload.
func (u *S3Upload) Reserve(n int64) error {
	if n < 0 || n > maxS3Part-minPartSize {
		return fmt.Errorf("writing %s: the beton's head (its header and the metadata of every sample) takes %d bytes, more than the %d (5 GiB less 5 MiB) an S3 part holds beside the first data; write it to a local file, or the dataset as several betons",
			u.name, n, maxS3Part-minPartSize)
	}
	return nil
}

// Write appends p to the object, after the head. It fails once a part has
// failed.
func (u *S3Upload) Write(p []byte) (int, error) {
	if u.ended {
		return 0, fmt.Errorf("writing %s: already committed or aborted", u.name)
	}
	if err := u.failed(); err != nil {
		return 0, err
	}
	n := len(p)
	u.written += int64(n)
	if len(u.first) < minPartSize {
		k := min(len(p), minPartSize-len(u.first))
		u.first = append(u.first, p[:k]...)
		p = p[k:]
	}
	for len(p) > 0 {
		if u.cur == nil {
			u.cur = make([]byte, 0, u.partSize)
		}
		k := min(len(p), u.partSize-len(u.cur))
		u.cur = append(u.cur, p[:k]...)
		p = p[k:]
		if len(u.cur) == u.partSize {
			if err := u.send(u.next, u.cur); err != nil {
				return n - len(p), err
			}
			u.next++
			u.cur = nil
			if (u.next-1)%partsPerDoubling == 0 && u.partSize < maxPartSize {
				u.partSize *= 2
			}
		}
	}
	return n, nil
}

// failed returns the error of a failed part, if any.
func (u *S3Upload) failed() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.err
}

// fail records the first failure and stops the parts in flight.
func (u *S3Upload) fail(err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.err == nil {
		u.err = err
		u.cancel(err)
	}
}

// stopped is the error of an upload whose context ended: the part that
// failed, or why it was stopped.
func (u *S3Upload) stopped() error {
	if err := u.failed(); err != nil {
		return err
	}
	return fmt.Errorf("writing %s: %w", u.name, context.Cause(u.ctx))
}

// send uploads part number n in the background, once slots are free: one
// for a part of up to uploadMemory/Parallel bytes, more for a larger one.
func (u *S3Upload) send(n int32, data []byte) error {
	if n > maxUploadParts {
		return fmt.Errorf("writing %s: the beton is larger than %.1f TiB, the most one upload of this writer holds (%d parts); write it to a local file",
			u.name, float64(maxUploadSize)/(1<<40), maxUploadParts)
	}
	k := partSlots(len(data), cap(u.slots))
	for i := range k {
		select {
		case u.slots <- struct{}{}:
		case <-u.ctx.Done():
			for range i {
				<-u.slots
			}
			return u.stopped()
		}
	}
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		defer func() {
			for range k {
				<-u.slots
			}
		}()
		u.upload(n, data)
	}()
	return nil
}

// partSlots is how many of parallel slots a part of size bytes takes: the
// parts in flight hold at most uploadMemory bytes, or one part.
func partSlots(size, parallel int) int {
	unit := max(uploadMemory/parallel, 1)
	return min(max((size+unit-1)/unit, 1), parallel)
}

// progressBody is a part's body, which calls progress as the transport
// reads it: an attempt that sends nothing for AttemptTimeout stalled.
type progressBody struct {
	*bytes.Reader
	progress func()
}

func (b *progressBody) Read(p []byte) (int, error) {
	n, err := b.Reader.Read(p)
	if n > 0 {
		b.progress()
	}
	return n, err
}

// upload sends part n and records it, or the error.
func (u *S3Upload) upload(n int32, data []byte) {
	sum := md5.Sum(data)
	md5 := base64.StdEncoding.EncodeToString(sum[:])
	deadline := u.opts.UploadDeadline + time.Duration(len(data)/partRate)*time.Second
	var etag *string
	err := u.request(u.ctx, fmt.Sprintf("part %d", n), deadline, u.opts.AttemptTimeout, func(ctx context.Context, progress func()) error {
		out, err := u.client.UploadPart(ctx, &s3.UploadPartInput{
			Bucket: &u.bucket, Key: &u.key, UploadId: &u.id, PartNumber: aws.Int32(n),
			Body: &progressBody{bytes.NewReader(data), progress}, ContentLength: aws.Int64(int64(len(data))),
			ContentMD5: aws.String(md5),
		})
		if err != nil {
			return classifyS3(err)
		}
		etag = out.ETag
		return nil
	})
	if err != nil {
		u.fail(fmt.Errorf("writing %s: %w", u.name, uploadError(err)))
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.parts = append(u.parts, types.CompletedPart{PartNumber: aws.Int32(n), ETag: etag})
}

// Commit sends the head with the first bytes written as part 1, the rest
// as the last part, and completes the upload: the object appears. On
// error the upload is aborted, and a failed abort joins the error.
func (u *S3Upload) Commit(head []byte) error {
	if u.ended {
		return fmt.Errorf("writing %s: already committed or aborted", u.name)
	}
	if err := u.Reserve(int64(len(head))); err != nil {
		return withAbort(err, u.Abort())
	}
	one := slices.Concat(head, u.first)
	u.first = nil
	if u.next == 2 {
		// Nothing sent yet: one part holds everything.
		one = append(one, u.cur...)
		u.cur = nil
	}
	if err := u.send(1, one); err != nil {
		return withAbort(err, u.Abort())
	}
	if len(u.cur) > 0 {
		if err := u.send(u.next, u.cur); err != nil {
			return withAbort(err, u.Abort())
		}
		u.cur = nil
	}
	u.wg.Wait()
	if err := u.failed(); err != nil {
		return withAbort(err, u.Abort())
	}
	slices.SortFunc(u.parts, func(a, b types.CompletedPart) int { return int(*a.PartNumber - *b.PartNumber) })
	size := int64(len(head)) + u.written
	attempts := 0
	// S3 may take a while to answer (it assembles the parts), sending
	// only white space meanwhile: an attempt may take the whole deadline.
	err := u.request(u.ctx, "completing the upload", u.opts.UploadDeadline, u.opts.UploadDeadline, func(ctx context.Context, progress func()) error {
		attempts++
		_, err := u.client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
			Bucket: &u.bucket, Key: &u.key, UploadId: &u.id,
			MultipartUpload: &types.CompletedMultipartUpload{Parts: u.parts},
		})
		var nsu *types.NoSuchUpload
		if attempts > 1 && errors.As(err, &nsu) && u.completed(ctx, size) {
			return nil // an earlier attempt completed it, its answer lost
		}
		if err != nil {
			return classifyS3(err)
		}
		return nil
	})
	if err != nil {
		return withAbort(fmt.Errorf("writing %s: %w", u.name, uploadError(err)), u.Abort())
	}
	u.ended = true
	u.cancel(nil)
	return nil
}

// withAbort is err, and the abort's error after it when the abort failed.
func withAbort(err, abort error) error {
	if abort == nil {
		return err
	}
	return fmt.Errorf("%w; %w", err, abort)
}

// completed reports whether the object exists with size bytes.
func (u *S3Upload) completed(ctx context.Context, size int64) bool {
	out, err := u.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &u.bucket, Key: &u.key})
	return err == nil && aws.ToInt64(out.ContentLength) == size
}

// Abort stops the parts in flight and aborts the upload, so that S3 keeps
// none of its parts. It waits for S3 up to abortDeadline, retrying as any
// request; an abort that fails is an *AbortError naming the upload. Later
// calls return the first's result.
func (u *S3Upload) Abort() error {
	if u.ended {
		return u.abortErr
	}
	u.ended = true
	u.cancel(errAborted)
	u.wg.Wait()
	u.first, u.cur = nil, nil
	u.opts.Logger.Info("aborting the upload", "object", u.name, "upload_id", u.id)
	err := u.request(context.Background(), "aborting the upload", min(abortDeadline, u.opts.UploadDeadline), u.opts.AttemptTimeout, func(ctx context.Context, progress func()) error {
		_, err := u.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &u.bucket, Key: &u.key, UploadId: &u.id})
		var nsu *types.NoSuchUpload
		if err != nil && !errors.As(err, &nsu) {
			return classifyS3(err)
		}
		return nil
	})
	if err != nil {
		u.abortErr = &AbortError{Name: u.name, Bucket: u.bucket, Key: u.key, UploadID: u.id, Err: err}
	}
	return u.abortErr
}

// Create begins writing the object that url names: s3://bucket/key, by
// multipart upload. Local files are written by the beton package itself
// (beton.Create); other schemes are refused with a sentence.
func Create(ctx context.Context, url string, opts Options) (*S3Upload, error) {
	scheme, rest, ok := splitScheme(url)
	if !ok || scheme != "s3" {
		return nil, fmt.Errorf("writing %s: only s3://bucket/key URLs are written over the network; write to a local file and upload it", redactURL(url))
	}
	bucket, key, err := s3Object(url, rest)
	if err != nil {
		return nil, fmt.Errorf("writing %w", err)
	}
	return CreateS3(ctx, bucket, key, opts)
}
