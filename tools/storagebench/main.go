// Command storagebench is the reading side of scripts/bench.sh storage: it
// uploads a benchmark dataset to an S3 server, caps the bandwidth of the
// link to it, and reads one epoch of images either as one S3 object per
// image or through an ffcvfs mount, printing one line of key=value results
// for the script to tabulate.
//
//	storagebench ports N
//	storagebench put   -endpoint URL -bucket B -beton FILE -key K -folder DIR -prefix P
//	storagebench link  -listen ADDR -to ADDR -rate MBS
//	storagebench get   -endpoint URL -bucket B -prefix P [-j 4] [-batch 64] [-seed S] [-max-seconds T]
//	storagebench mount -order quasi-random|random|random-announced [-j 4] [-batch 64] [-seed S] [-shard R-of-W[.nodes-N]] [-max-seconds T] MNT
//	storagebench replay -log FILE (-url URL | -endpoint URL -bucket B -key K) [-j N]
//
// S3 credentials and region come from the usual AWS environment variables.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/ffcvfs/ffcvfs/control"
)

const usage = `usage:
  storagebench ports N
      prints N TCP ports of 127.0.0.1 that were free a moment ago
  storagebench put   -endpoint URL -bucket B -beton FILE -key K -folder DIR -prefix P [-j 8]
      creates bucket B and uploads FILE as K and every file under DIR as P/<path under DIR>
  storagebench link  -listen ADDR -to ADDR -rate MBS
      forwards TCP connections from ADDR to ADDR, all of them together sending
      at most MBS megabytes (10^6 bytes) per second towards the client
  storagebench get   -endpoint URL -bucket B -prefix P [-j 4] [-batch 64] [-seed S] [-max-seconds T]
      GETs every object under P once, in random order, in batches dealt to J
      workers as torch's DataLoader does (as mount reads)
  storagebench mount -order KIND [-j 4] [-batch 64] [-seed S] [-epoch E] [-shard R-of-W[.nodes-N]] [-max-seconds T] MNT
      reads every image of an ffcvfs mount once, in batches dealt to J workers as
      torch's DataLoader does; KIND is quasi-random or random-announced (the order
      read from MNT/.ffcvfs/orders/, which announces it) or random (a permutation
      of our own, not announced)

  storagebench replay -log FILE (-url URL | -endpoint URL -bucket B -key K) [-j N]
      fetches the byte ranges that an nginx access log (format "CONN RANGE STATUS
      BYTES") names, from URL, or from s3://B/K through one presigned URL, over N
      connections (default: as many as the log's), each range once: the
      reference for what a mount's reads of the same ranges cost; prints
      ranges=N bytes=B seconds=S cpu_reader=MS conns=N

get and mount print: images=N bytes=B dataset_images=N dataset_bytes=B
fetched=B requests=R seconds=S (fetched: bytes read from storage, in R requests;
for mount, from
MNT/.ffcvfs/stats.json). -max-seconds stops reading after T seconds.`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	cmds := map[string]func([]string) error{"ports": ports, "put": put, "link": link, "get": get, "mount": mount, "replay": replay}
	run, ok := cmds[os.Args[1]]
	if !ok {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	if err := run(os.Args[2:]); err != nil {
		fmt.Fprintf(os.Stderr, "storagebench %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func newFlags(name string) *flag.FlagSet {
	fl := flag.NewFlagSet(name, flag.ExitOnError)
	fl.Usage = func() { fmt.Fprintln(os.Stderr, usage) }
	return fl
}

// client returns an S3 client of endpoint with path-style addressing and
// checksums only where required, like ffcvfs's own.
func client(ctx context.Context, endpoint string) (*s3.Client, error) {
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, err
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	return s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.BaseEndpoint = aws.String(endpoint)
		o.UsePathStyle = true
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
		o.DisableLogOutputChecksumValidationSkipped = true
	}), nil
}

func ports(args []string) error {
	n := 0
	if len(args) == 1 {
		n, _ = strconv.Atoi(args[0])
	}
	if n < 1 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	// All open at once, so that they differ.
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		defer l.Close()
		ls = append(ls, l)
	}
	for _, l := range ls {
		fmt.Println(l.Addr().(*net.TCPAddr).Port)
	}
	return nil
}

func put(args []string) error {
	fl := newFlags("put")
	endpoint := fl.String("endpoint", "", "S3 endpoint URL")
	bucket := fl.String("bucket", "", "bucket to create")
	betonPath := fl.String("beton", "", "beton file to upload")
	key := fl.String("key", "", "key of the beton")
	folder := fl.String("folder", "", "folder whose files to upload one object each")
	prefix := fl.String("prefix", "", "key prefix of those objects")
	jobs := fl.Int("j", 8, "parallel uploads")
	fl.Parse(args)
	if *endpoint == "" || *bucket == "" || *betonPath == "" || *key == "" || (*folder == "") != (*prefix == "") {
		fl.Usage()
		os.Exit(2)
	}
	ctx := context.Background()
	c, err := client(ctx, *endpoint)
	if err != nil {
		return err
	}
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: bucket}); err != nil {
		return fmt.Errorf("create bucket %s: %w", *bucket, err)
	}
	type upload struct{ path, key string }
	todo := []upload{{*betonPath, *key}}
	if *folder == "" {
		*folder = os.DevNull // no files: the beton alone
	}
	err = filepath.WalkDir(*folder, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(*folder, p)
		todo = append(todo, upload{p, *prefix + "/" + filepath.ToSlash(rel)})
		return nil
	})
	if err != nil {
		return err
	}
	var next atomic.Int64
	errs := make(chan error, *jobs)
	for range *jobs {
		go func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(todo) {
					errs <- nil
					return
				}
				if err := putFile(ctx, c, *bucket, todo[i].key, todo[i].path); err != nil {
					next.Store(int64(len(todo)))
					errs <- err
					return
				}
			}
		}()
	}
	for range *jobs {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	return err
}

func putFile(ctx context.Context, c *s3.Client, bucket, key, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: &key, Body: f, ContentLength: aws.Int64(st.Size())})
	if err != nil {
		return fmt.Errorf("put %s as s3://%s/%s: %w", path, bucket, key, err)
	}
	return nil
}

// link forwards connections and caps the bytes they send towards clients,
// all together, with one token bucket: a shared link, where toxiproxy's
// bandwidth toxic caps each connection on its own.
func link(args []string) error {
	fl := newFlags("link")
	listen := fl.String("listen", "127.0.0.1:0", "address to listen on")
	to := fl.String("to", "", "address to forward to")
	rate := fl.Float64("rate", 100, "cap towards clients, MB/s (10^6 bytes)")
	fl.Parse(args)
	if *to == "" || *rate <= 0 {
		fl.Usage()
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	b := &bucket{rate: *rate * 1e6, depth: 2 * time.Millisecond}
	// One line per connection accepted, so that a bench can count the
	// connections each way of reading opens.
	for n := 1; ; n++ {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		fmt.Printf("connection %d from %s\n", n, c.RemoteAddr())
		go forward(c, *to, b)
	}
}

// bucket is a token bucket on a virtual clock: sending n bytes takes
// n/rate seconds of the link, and a sender sleeps until its bytes have
// left. Up to depth of idle link time is credited, so that oversleeping
// does not lose bandwidth.
type bucket struct {
	rate  float64 // bytes per second
	depth time.Duration

	mu   sync.Mutex
	free time.Time // guarded by mu: when the link is free again
}

func (b *bucket) take(n int) {
	b.mu.Lock()
	now := time.Now()
	if b.free.Before(now.Add(-b.depth)) {
		b.free = now.Add(-b.depth)
	}
	b.free = b.free.Add(time.Duration(float64(n) / b.rate * float64(time.Second)))
	until := b.free
	b.mu.Unlock()
	if d := time.Until(until); d > 0 {
		time.Sleep(d)
	}
}

func forward(c net.Conn, to string, b *bucket) {
	defer c.Close()
	s, err := net.Dial("tcp", to)
	if err != nil {
		return
	}
	defer s.Close()
	go func() {
		io.Copy(s, c)
		if tc, ok := s.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := s.Read(buf)
		if n > 0 {
			b.take(n)
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// result is what get and mount print.
type result struct {
	images, bytes               int64
	datasetImages, datasetBytes int64
	fetched, requests           int64
	seconds                     float64
}

func (r result) print() {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	fmt.Printf("images=%d bytes=%d dataset_images=%d dataset_bytes=%d fetched=%d requests=%d seconds=%.3f cpu_reader=%d\n",
		r.images, r.bytes, r.datasetImages, r.datasetBytes, r.fetched, r.requests, r.seconds, cpu.Milliseconds())
}

func get(args []string) error {
	fl := newFlags("get")
	endpoint := fl.String("endpoint", "", "S3 endpoint URL")
	bkt := fl.String("bucket", "", "bucket")
	prefix := fl.String("prefix", "", "key prefix of the images")
	jobs := fl.Int("j", 4, "parallel readers")
	batch := fl.Int("batch", 64, "images per batch")
	prefetch := fl.Int("prefetch", 2, "batches each reader may be ahead (DataLoader's prefetch_factor)")
	seed := fl.Uint64("seed", 0, "seed of the random order")
	maxSeconds := fl.Float64("max-seconds", 0, "stop after this many seconds (0: read everything)")
	fl.Parse(args)
	if *endpoint == "" || *bkt == "" || *prefix == "" || *jobs < 1 || *batch < 1 || *prefetch < 1 {
		fl.Usage()
		os.Exit(2)
	}
	ctx := context.Background()
	c, err := client(ctx, *endpoint)
	if err != nil {
		return err
	}
	type object struct {
		key  string
		size int64
	}
	var objs []object
	var r result
	p := s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{Bucket: bkt, Prefix: aws.String(*prefix + "/")})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("list s3://%s/%s/: %w", *bkt, *prefix, err)
		}
		for _, o := range page.Contents {
			objs = append(objs, object{aws.ToString(o.Key), aws.ToInt64(o.Size)})
			r.datasetBytes += aws.ToInt64(o.Size)
		}
	}
	if len(objs) == 0 {
		return fmt.Errorf("no objects under s3://%s/%s/", *bkt, *prefix)
	}
	r.datasetImages = int64(len(objs))
	rng := rand.New(rand.NewPCG(*seed, 1))
	rng.Shuffle(len(objs), func(i, j int) { objs[i], objs[j] = objs[j], objs[i] })

	start := time.Now()
	deadline := deadlineOf(start, *maxSeconds)
	order := make([]int, len(objs))
	for i := range order {
		order[i] = i
	}
	bufs := make([]*bytes.Buffer, *jobs)
	for i := range bufs {
		bufs[i] = bytes.NewBuffer(make([]byte, 0, 1<<20))
	}
	images, nbytes, err := readBatches(order, *jobs, *batch, *prefetch, deadline, func(w, i int) (int64, error) {
		out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: bkt, Key: &objs[i].key})
		if err != nil {
			return 0, fmt.Errorf("get s3://%s/%s: %w", *bkt, objs[i].key, err)
		}
		defer out.Body.Close()
		bufs[w].Reset()
		n, err := bufs[w].ReadFrom(out.Body)
		if err != nil {
			return n, fmt.Errorf("get s3://%s/%s: %w", *bkt, objs[i].key, err)
		}
		return n, nil
	})
	r.seconds = time.Since(start).Seconds()
	if err != nil {
		return err
	}
	r.images, r.bytes, r.fetched, r.requests = images, nbytes, nbytes, images
	r.print()
	return nil
}

func deadlineOf(start time.Time, seconds float64) time.Time {
	if seconds <= 0 {
		return start.Add(1000 * time.Hour)
	}
	return start.Add(time.Duration(seconds * float64(time.Second)))
}

// fetchedSoFar returns the bytes the mount's cache has read from storage
// (with tiers, past them), and in how many requests (of the cache: with
// tiers, some are served by them).
func fetchedSoFar(mnt string) (bytes, requests int64, err error) {
	st, err := control.ReadStats(mnt)
	if err != nil {
		return 0, 0, err
	}
	if st.Cache.Tiers != nil {
		return int64(st.Cache.Tiers.StorageBytes), int64(st.Cache.Requests), nil
	}
	return int64(st.Cache.BytesRead), int64(st.Cache.Requests), nil
}

func mount(args []string) error {
	fl := newFlags("mount")
	kind := fl.String("order", "quasi-random", "quasi-random, random-announced or random")
	jobs := fl.Int("j", 4, "workers")
	batch := fl.Int("batch", 64, "samples per batch; each worker reads whole batches")
	prefetch := fl.Int("prefetch", 2, "batches each worker may be ahead of the consumer, as DataLoader's prefetch_factor")
	seed := fl.Uint64("seed", 0, "seed of the order")
	epoch := fl.Uint64("epoch", 0, "epoch of the order")
	shard := fl.String("shard", "", "read one rank's order: RANK-of-WORLD, or RANK-of-WORLD.nodes-N for a node-affine one")
	maxSeconds := fl.Float64("max-seconds", 0, "stop after this many seconds (0: read everything)")
	fl.Parse(args)
	if fl.NArg() != 1 || *jobs < 1 || *batch < 1 || *prefetch < 1 {
		fl.Usage()
		os.Exit(2)
	}
	mnt := fl.Arg(0)
	var r result
	// ImageFolder's indices: classes by sorted name, then files by sorted
	// name, which is WalkDir's order. The control folder is never listed.
	var files []string
	err := filepath.WalkDir(mnt, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		files = append(files, p)
		r.datasetBytes += info.Size()
		return nil
	})
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no files under %s", mnt)
	}
	r.datasetImages = int64(len(files))
	before, beforeReq, err := fetchedSoFar(mnt)
	if err != nil {
		return err
	}

	start := time.Now()
	var order []int
	switch *kind {
	case "quasi-random", "random-announced":
		k := strings.TrimSuffix(*kind, "-announced")
		path := control.Path(mnt, control.OrdersDir, k, strconv.FormatUint(*seed, 10), strconv.FormatUint(*epoch, 10))
		if *shard != "" {
			path = control.Path(mnt, control.OrdersDir, k, strconv.FormatUint(*seed, 10), *shard, strconv.FormatUint(*epoch, 10))
		}
		text, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, f := range strings.Fields(string(text)) {
			i, err := strconv.Atoi(f)
			if err != nil || i < 0 || i >= len(files) {
				return fmt.Errorf("%s: %q is not an ImageFolder index below %d", path, f, len(files))
			}
			order = append(order, i)
		}
	case "random":
		order = rand.New(rand.NewPCG(*seed, *epoch)).Perm(len(files))
	default:
		return fmt.Errorf("-order %q: want quasi-random, random-announced or random", *kind)
	}
	deadline := deadlineOf(start, *maxSeconds)
	bufs := make([][]byte, *jobs)
	for i := range bufs {
		bufs[i] = make([]byte, 1<<20)
	}
	images, nbytes, err := readBatches(order, *jobs, *batch, *prefetch, deadline, func(w, i int) (int64, error) {
		return readFile(files[i], bufs[w])
	})
	r.seconds = time.Since(start).Seconds()
	if err != nil {
		return err
	}
	after, afterReq, err := fetchedSoFar(mnt)
	if err != nil {
		return err
	}
	r.images, r.bytes, r.fetched, r.requests = images, nbytes, after-before, afterReq-beforeReq
	r.print()
	return nil
}

// readBatches reads the samples of order the way torch's DataLoader with
// `jobs` workers does: the order is cut into batches, batch b goes to
// worker b mod jobs, each worker reads the samples of its batch one after
// the other with read(worker, sample), and a worker starts a batch only
// while it is fewer than jobs×prefetch batches ahead of the consumer,
// which takes batches in order as soon as they are done.
func readBatches(order []int, jobs, batch, prefetch int, deadline time.Time, read func(w, i int) (int64, error)) (images, nbytes int64, err error) {
	nb := (len(order) + batch - 1) / batch
	var (
		mu       sync.Mutex
		cond     = sync.NewCond(&mu)
		done     = make([]bool, nb)
		consumed = 0 // guarded by mu: batches taken by the consumer
		firstErr error
		stop     atomic.Bool
		wg       sync.WaitGroup
		nImg     atomic.Int64
		nBytes   atomic.Int64
	)
	for w := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := w; b < nb && !stop.Load(); b += jobs {
				mu.Lock()
				for b >= consumed+jobs*prefetch && !stop.Load() {
					cond.Wait()
				}
				mu.Unlock()
				for _, i := range order[b*batch : min(len(order), (b+1)*batch)] {
					if stop.Load() || time.Now().After(deadline) {
						stop.Store(true)
						break
					}
					n, err := read(w, i)
					if err != nil {
						mu.Lock()
						if firstErr == nil {
							firstErr = err
						}
						mu.Unlock()
						stop.Store(true)
						break
					}
					nImg.Add(1)
					nBytes.Add(n)
				}
				mu.Lock()
				done[b] = true
				for consumed < nb && done[consumed] {
					consumed++
				}
				cond.Broadcast()
				mu.Unlock()
			}
			mu.Lock()
			cond.Broadcast()
			mu.Unlock()
		}()
	}
	wg.Wait()
	return nImg.Load(), nBytes.Load(), firstErr
}

func readFile(path string, buf []byte) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var total int64
	for {
		n, err := f.Read(buf)
		total += int64(n)
		if errors.Is(err, io.EOF) {
			return total, nil
		}
		if err != nil {
			return total, fmt.Errorf("read %s: %w", path, err)
		}
	}
}
