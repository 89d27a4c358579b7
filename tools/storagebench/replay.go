package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// span is one range a log names: length bytes from off.
type span struct{ off, length int64 }

// readRanges returns the ranges of an nginx access log of the format
// "CONN RANGE STATUS BYTES" (206 answers only), and how many connections
// carried them.
func readRanges(path string) ([]span, int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	var spans []span
	conns := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 3 || fs[2] != "206" || !strings.HasPrefix(fs[1], "bytes=") {
			continue
		}
		a, b, ok := strings.Cut(strings.TrimPrefix(fs[1], "bytes="), "-")
		lo, err1 := strconv.ParseInt(a, 10, 64)
		hi, err2 := strconv.ParseInt(b, 10, 64)
		if !ok || err1 != nil || err2 != nil || hi < lo || hi-lo > 1<<30 {
			return nil, 0, fmt.Errorf("%s: a line with range %q", path, fs[1])
		}
		spans = append(spans, span{lo, hi - lo + 1})
		conns[fs[0]] = true
	}
	return spans, len(conns), sc.Err()
}

func replay(args []string) error {
	fl := newFlags("replay")
	logPath := fl.String("log", "", "nginx access log naming the ranges")
	url := fl.String("url", "", "the object's http(s) URL")
	endpoint := fl.String("endpoint", "", "S3 endpoint URL")
	bucket := fl.String("bucket", "", "S3 bucket")
	key := fl.String("key", "", "S3 key")
	jobs := fl.Int("j", 0, "connections (0: as many as the log's)")
	fl.Parse(args)
	if *logPath == "" || (*url == "") == (*endpoint == "") || *endpoint != "" && (*bucket == "" || *key == "") || *jobs < 0 {
		fl.Usage()
		os.Exit(2)
	}
	spans, conns, err := readRanges(*logPath)
	if err != nil {
		return err
	}
	if len(spans) == 0 {
		return fmt.Errorf("%s names no range", *logPath)
	}
	j := *jobs
	if j == 0 {
		j = max(conns, 1)
	}
	ctx := context.Background()
	target := *url
	if *endpoint != "" {
		// One signature for every range, as curl --parallel over a
		// presigned URL: no signing per request.
		c, err := client(ctx, *endpoint)
		if err != nil {
			return err
		}
		pre, err := s3.NewPresignClient(c).PresignGetObject(ctx, &s3.GetObjectInput{Bucket: bucket, Key: key}, s3.WithPresignExpires(time.Hour))
		if err != nil {
			return err
		}
		target = pre.URL
	}
	hc := &http.Client{Transport: &http.Transport{
		MaxIdleConns: j, MaxIdleConnsPerHost: j, MaxConnsPerHost: j,
		DisableCompression: true, ForceAttemptHTTP2: false,
	}}
	var next, nbytes atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	var ru0 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	start := time.Now()
	for range j {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []byte
			for {
				i := next.Add(1) - 1
				if i >= int64(len(spans)) {
					return
				}
				sp := spans[i]
				if int64(cap(buf)) < sp.length {
					buf = make([]byte, sp.length)
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
				req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", sp.off, sp.off+sp.length-1))
				resp, err := hc.Do(req)
				if err == nil {
					if resp.StatusCode != http.StatusPartialContent {
						err = fmt.Errorf("range %d+%d: %s", sp.off, sp.length, resp.Status)
					} else {
						_, err = io.ReadFull(resp.Body, buf[:sp.length])
					}
					resp.Body.Close()
				}
				if err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				nbytes.Add(sp.length)
			}
		}()
	}
	wg.Wait()
	el := time.Since(start).Seconds()
	if firstErr != nil {
		return firstErr
	}
	var ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := time.Duration(ru1.Utime.Nano()+ru1.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano()) / time.Millisecond
	fmt.Printf("ranges=%d bytes=%d seconds=%.3f cpu_reader=%d conns=%d\n", len(spans), nbytes.Load(), el, cpu, j)
	return nil
}
