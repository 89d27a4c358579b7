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
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// Sizes of an upload's parts. S3 wants every part but the last to hold at
// least 5 MiB, and at most 10,000 parts: parts start at 8 MiB and double
// every 1,000, so that an upload can reach tens of terabytes.
const (
	minPartSize       = 5 << 20
	uploadPartSize    = 8 << 20
	partsPerDoubling  = 1000
	maxUploadParts    = 10000
	abortUploadBudget = time.Minute
)

// S3Upload writes one S3 object by a multipart upload, in the two steps of
// a beton's writer: the bytes after the head, in order (Write), then the
// head (Commit). The head is part 1, sent last together with the first
// 5 MiB written (so that part 1 is as large as S3 wants every part but
// the last to be); the rest is sent in parts while it is written, a few at
// a time. The object appears only when CompleteMultipartUpload succeeds;
// Abort, or a failed Commit, aborts the upload, so that no object and no
// incomplete upload stays behind. A writer killed with SIGKILL cannot
// abort: a lifecycle rule (AbortIncompleteMultipartUpload) on the bucket
// removes what it left.
//
// Memory: the first 5 MiB, the part being filled and the parts in flight
// (Options.Parallel of them).
//
// The SDK's own retrier sends each request up to Options.MaxRetries+1
// times; every part carries its MD5 (Content-MD5), which S3 checks.
type S3Upload struct {
	client      *s3.Client
	bucket, key string
	name        string
	id          string

	ctx    context.Context
	cancel context.CancelFunc

	first    []byte // the first bytes written, sent with the head
	cur      []byte // the part being filled
	partSize int
	next     int32         // the number of the next part sent while writing
	slots    chan struct{} // one per part in flight

	mu    sync.Mutex
	parts []types.CompletedPart
	err   error
	wg    sync.WaitGroup

	ended bool // committed or aborted
}

// CreateS3 begins a multipart upload to s3://bucket/key. Configuration
// and credentials come as for OpenS3; a missing bucket or denied access
// fails at once.
func CreateS3(ctx context.Context, bucket, key string, opts Options) (*S3Upload, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	name := "s3://" + bucket + "/" + key
	attempts := opts.MaxRetries + 1
	if opts.MaxRetries < 0 {
		attempts = 1
	}
	retryer := retry.NewStandard(func(o *retry.StandardOptions) {
		o.MaxAttempts = attempts
		o.MaxBackoff = opts.BackoffMax
	})
	client, err := newS3Client(ctx, &opts, retryer)
	if err != nil {
		return nil, fmt.Errorf("writing %s: %w", name, err)
	}
	out, err := client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &bucket, Key: &key})
	if err != nil {
		return nil, fmt.Errorf("writing %s: %w", name, uploadError(err))
	}
	uctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	u := &S3Upload{
		client: client, bucket: bucket, key: key, name: name, id: aws.ToString(out.UploadId),
		ctx: uctx, cancel: cancel,
		partSize: uploadPartSize,
		next:     2,
		slots:    make(chan struct{}, opts.Parallel),
	}
	// A cancelled ctx stops the upload: parts in flight fail, and Commit
	// with them.
	context.AfterFunc(ctx, u.cancel)
	return u, nil
}

// uploadError says what a failed S3 call means, where its status tells.
func uploadError(err error) error {
	switch httpStatus(err) {
	case 404:
		return fmt.Errorf("the bucket does not exist: %w", err)
	case 403:
		return fmt.Errorf("%s: %w", accessDenied, err)
	}
	return err
}

// Name returns the object's URL.
func (u *S3Upload) Name() string { return u.name }

// Reserve does nothing: the head is part 1, whatever its size.
func (u *S3Upload) Reserve(int64) error { return nil }

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
			if (u.next-1)%partsPerDoubling == 0 {
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

// send uploads part number n in the background, once a slot is free.
func (u *S3Upload) send(n int32, data []byte) error {
	if n > maxUploadParts {
		return fmt.Errorf("writing %s: more than %d parts", u.name, maxUploadParts)
	}
	select {
	case u.slots <- struct{}{}:
	case <-u.ctx.Done():
		return fmt.Errorf("writing %s: %w", u.name, u.ctx.Err())
	}
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		defer func() { <-u.slots }()
		u.upload(n, data)
	}()
	return nil
}

// upload sends part n and records it, or the error.
func (u *S3Upload) upload(n int32, data []byte) {
	sum := md5.Sum(data)
	out, err := u.client.UploadPart(u.ctx, &s3.UploadPartInput{
		Bucket: &u.bucket, Key: &u.key, UploadId: &u.id, PartNumber: aws.Int32(n),
		Body: bytes.NewReader(data), ContentLength: aws.Int64(int64(len(data))),
		ContentMD5: aws.String(base64.StdEncoding.EncodeToString(sum[:])),
	})
	u.mu.Lock()
	defer u.mu.Unlock()
	if err != nil {
		if u.err == nil {
			u.err = fmt.Errorf("writing %s: part %d: %w", u.name, n, uploadError(err))
			u.cancel()
		}
		return
	}
	u.parts = append(u.parts, types.CompletedPart{PartNumber: aws.Int32(n), ETag: out.ETag})
}

// Commit sends the head with the first bytes written as part 1, the rest
// as the last part, and completes the upload: the object appears. On
// error the upload is aborted.
func (u *S3Upload) Commit(head []byte) error {
	if u.ended {
		return fmt.Errorf("writing %s: already committed or aborted", u.name)
	}
	one := slices.Concat(head, u.first)
	u.first = nil
	if u.next == 2 {
		// Nothing sent yet: one part holds everything.
		one = append(one, u.cur...)
		u.cur = nil
	}
	if err := u.send(1, one); err != nil {
		u.Abort()
		return err
	}
	if len(u.cur) > 0 {
		if err := u.send(u.next, u.cur); err != nil {
			u.Abort()
			return err
		}
		u.cur = nil
	}
	u.wg.Wait()
	if err := u.failed(); err != nil {
		u.Abort()
		return err
	}
	slices.SortFunc(u.parts, func(a, b types.CompletedPart) int { return int(*a.PartNumber - *b.PartNumber) })
	_, err := u.client.CompleteMultipartUpload(u.ctx, &s3.CompleteMultipartUploadInput{
		Bucket: &u.bucket, Key: &u.key, UploadId: &u.id,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: u.parts},
	})
	if err != nil {
		u.Abort()
		return fmt.Errorf("writing %s: completing the upload: %w", u.name, uploadError(err))
	}
	u.ended = true
	u.cancel()
	return nil
}

// Abort stops the parts in flight and aborts the upload, so that S3 keeps
// none of its parts. It waits up to a minute for S3 to answer.
func (u *S3Upload) Abort() error {
	if u.ended {
		return nil
	}
	u.ended = true
	u.cancel()
	u.wg.Wait()
	u.first, u.cur = nil, nil
	ctx, cancel := context.WithTimeout(context.Background(), abortUploadBudget)
	defer cancel()
	_, err := u.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &u.bucket, Key: &u.key, UploadId: &u.id})
	if err != nil {
		var nsu *types.NoSuchUpload
		if errors.As(err, &nsu) {
			return nil
		}
		return fmt.Errorf("aborting the upload of %s (a lifecycle rule may remove it): %w", u.name, err)
	}
	return nil
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
