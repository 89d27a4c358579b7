package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ffcvfs/ffcvfs/control"
	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

// freePort returns a TCP port on 127.0.0.1 that nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// prometheusServer is Debian's prometheus scraping targets every second.
type prometheusServer struct {
	url string
	log *testenv.OutputBuffer
}

// startPrometheus runs prometheus on loopback with a job per target
// (job name → host:port), scraped every second; t.Cleanup stops it.
func startPrometheus(t *testing.T, targets map[string]string) *prometheusServer {
	t.Helper()
	bin := testenv.LookPath(t, "prometheus")
	dir := t.TempDir()
	var cfg strings.Builder
	cfg.WriteString("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n")
	for job, addr := range targets {
		fmt.Fprintf(&cfg, "  - job_name: %q\n    static_configs:\n      - targets: [%q]\n", job, addr)
	}
	conf := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(conf, []byte(cfg.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	p := &prometheusServer{url: "http://" + addr, log: &testenv.OutputBuffer{}}
	cmd := exec.Command(bin, "--config.file="+conf, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	deadline := time.Now().Add(testenv.Patience)
	for {
		resp, err := http.Get(p.url + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return p
			}
		}
		select {
		case <-exited:
			t.Fatalf("prometheus exited (%s):\n%s", cmd.ProcessState, p.log)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready in time:\n%s", p.log)
		}
	}
}

// query returns the value of an instant PromQL query that gives one
// sample, or an error (no sample yet, several, a failed query).
func (p *prometheusServer) query(q string) (float64, error) {
	resp, err := http.Get(p.url + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var r struct {
		Status string
		Error  string
		Data   struct {
			Result []struct {
				Value [2]any
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return 0, err
	}
	if r.Status != "success" {
		return 0, fmt.Errorf("%s: %s", q, r.Error)
	}
	if len(r.Data.Result) != 1 {
		return 0, fmt.Errorf("%s: %d series, want 1", q, len(r.Data.Result))
	}
	s, _ := r.Data.Result[0].Value[1].(string)
	return strconv.ParseFloat(s, 64)
}

// waitQuery waits up to testenv.Patience until query q gives want, and fails the test
// with the last value or error otherwise.
func (p *prometheusServer) waitQuery(t *testing.T, q string, want float64) {
	t.Helper()
	deadline := time.Now().Add(testenv.Patience)
	for {
		v, err := p.query(q)
		if err == nil && v == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus: %s = %v (err %v), want %v, in time", q, v, err, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// promtoolCheck fetches http://addr/metrics and runs promtool check
// metrics on it.
func promtoolCheck(t *testing.T, addr string) string {
	t.Helper()
	promtool := testenv.LookPath(t, "promtool")
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("%s/metrics: Content-Type %q, want the text exposition format", addr, ct)
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics on %s: %v\n%s", addr, err, out)
	}
	return string(body)
}

// metricsFeedClient reads epoch 0 of an ffcvfeed server, then prints
// "held" and waits for a line on stdin before reading the rest.
const metricsFeedClient = `
import sys
from ffcvfs import Loader

with Loader(sys.argv[1]) as loader:
    n = sum(len(labels) for _, labels in loader)
    print(n, flush=True)
    sys.stdin.readline()
    for e in range(1, loader.epochs):
        for _ in loader:
            pass
`

// TestMetricsPrometheus: Debian's prometheus scrapes a mount and an
// ffcvfeed serving a client; its HTTP API shows the counters moving as the
// reads did (files, bytes, FUSE reads, images, batches, slots, clients),
// and promtool accepts both expositions.
func TestMetricsPrometheus(t *testing.T) {
	py := installedPython(t, "numpy")
	testenv.LookPath(t, "prometheus")
	testenv.LookPath(t, "promtool")
	beton := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	mountAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	mnt := mountBeton(t, beton, "--metrics-addr", mountAddr)

	const bsz, epochs, slots = 16, 2, 4
	feedAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	feed := startFeed(t, beton, "--batch-size", strconv.Itoa(bsz), "--resolution", "32", "--epochs", strconv.Itoa(epochs),
		"--slots", strconv.Itoa(slots), "--workers", "2", "--metrics-addr", feedAddr, "--decoded-cache-size", "64MiB")

	prom := startPrometheus(t, map[string]string{"mount": mountAddr, "feed": feedAddr})
	prom.waitQuery(t, `up{job="mount"}`, 1)
	prom.waitQuery(t, `up{job="feed"}`, 1)
	// Nothing read yet.
	prom.waitQuery(t, `ffcvfs_images_read_total`, 0)
	prom.waitQuery(t, `ffcvfeed_clients_connected`, 0)

	// The mount: read every file once.
	files := mountedFiles(t, mnt)
	var size int64
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(mnt, f))
		if err != nil {
			t.Fatal(err)
		}
		size += int64(len(b))
	}
	prom.waitQuery(t, `ffcvfs_images_read_total`, float64(len(files)))
	prom.waitQuery(t, `ffcvfs_read_bytes_total{file="jpg"}`, float64(size))
	prom.waitQuery(t, `ffcvfs_read_errors_total`, 0)
	if v, err := prom.query(`ffcvfs_fuse_request_duration_seconds_count{op="read"}`); err != nil || v < float64(len(files)) {
		t.Errorf("FUSE READs timed: %v (err %v), want at least one per file (%d)", v, err, len(files))
	}
	if v, err := prom.query(`ffcvfs_fuse_requests_total{op="read"} - ffcvfs_fuse_request_duration_seconds_count{op="read"}`); err != nil || v != 0 {
		t.Errorf("READs counted minus READs timed = %v (err %v), want 0", v, err)
	}
	if v, err := prom.query(`sum(ffcvfs_cache_hits_total) + sum(ffcvfs_cache_misses_total{tier="ram"})`); err != nil || v != float64(len(files)) {
		t.Errorf("cache hits + misses = %v (err %v), want one per file read (%d)", v, err, len(files))
	}
	st, err := control.ReadStats(mnt)
	if err != nil || st.Cache.BytesRead == 0 {
		t.Fatalf("stats.json: %v; bytes read from storage: %d", err, st.Cache.BytesRead)
	}
	prom.waitQuery(t, `ffcvfs_storage_read_bytes_total`, float64(st.Cache.BytesRead))

	// ffcvfeed: the client takes epoch 0 and holds; the server then fills
	// every slot with epoch 1's first batches and waits.
	cmd := exec.Command(py, "-c", metricsFeedClient, feed.sock)
	cmd.Dir = t.TempDir()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line := make([]byte, 64)
	n, _ := stdout.Read(line)
	got, err := strconv.Atoi(strings.TrimSpace(string(line[:n])))
	if err != nil || got != len(files) {
		t.Fatalf("the client read %q images of epoch 0, want %d; stderr:\n%s", line[:n], len(files), stderr.String())
	}
	perEpoch := (len(files) + bsz - 1) / bsz
	prom.waitQuery(t, `ffcvfeed_clients_connected`, 1)
	prom.waitQuery(t, `ffcvfeed_batches_total`, float64(perEpoch+slots))
	prom.waitQuery(t, `ffcvfeed_images_total`, float64(len(files)+slots*bsz))
	prom.waitQuery(t, `ffcvfeed_ring_slots_in_use`, slots)
	prom.waitQuery(t, `ffcvfeed_decode_errors_total`, 0)
	prom.waitQuery(t, `ffcvfeed_epoch`, 1)
	// Every image held after epoch 0; epoch 1's batches made from them.
	prom.waitQuery(t, `ffcvfeed_decoded_cache_images{where="ram"}`, float64(len(files)))
	prom.waitQuery(t, `ffcvfeed_decoded_cache_hits_total`, float64(slots*bsz))
	prom.waitQuery(t, `ffcvfeed_decoded_cache_misses_total`, float64(len(files)))
	prom.waitQuery(t, `ffcvfeed_decoded_cache_size_bytes{where="ram"}`, 64<<20)
	if v, err := prom.query(`ffcvfeed_decoded_cache_bytes{where="ram"} <= ffcvfeed_decoded_cache_size_bytes{where="ram"}`); err != nil || v == 0 {
		t.Errorf("the decoded-image cache holds %v bytes (err %v), more than its size or none", v, err)
	}
	if v, err := prom.query(`ffcvfeed_cache_loads_total{kind="page"}`); err != nil || v < 1 {
		t.Errorf("ffcvfeed's cache loads: %v (err %v), want ≥ 1", v, err)
	}

	mountText := promtoolCheck(t, mountAddr)
	feedText := promtoolCheck(t, feedAddr)
	for _, name := range []string{"ffcvfs_fuse_request_duration_seconds_bucket", "ffcvfs_cache_budget_bytes", "ffcvfs_storage_retries_total", "go_goroutines", "process_resident_memory_bytes"} {
		if !strings.Contains(mountText, "\n"+name) {
			t.Errorf("the mount's metrics lack %s", name)
		}
	}
	for _, name := range []string{"ffcvfeed_images_total", "ffcvfeed_ring_slots", "ffcvfeed_clients_connected", "ffcvfeed_storage_read_bytes_total"} {
		if !strings.Contains(feedText, "\n"+name) {
			t.Errorf("ffcvfeed's metrics lack %s", name)
		}
	}

	// Let the client finish; the server ends with the stream.
	if _, err := stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("client: %v\n%s", err, stderr.String())
		}
	case <-ctx.Done():
		t.Fatal("the client did not finish within a minute")
	}
	feed.waitExit(t)
}

// TestMetricsAddr: --metrics-addr listens on loopback unless given a
// host, and a bad address is refused before anything is mounted.
func TestMetricsAddr(t *testing.T) {
	beton := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	port := freePort(t)
	mountBeton(t, beton, "--metrics-addr", strconv.Itoa(port))
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	ffcvfs := binary(t, "ffcvfs")
	for _, out := range []string{
		netstatListeners(t, port),
	} {
		if !strings.Contains(out, fmt.Sprintf("127.0.0.1:%d", port)) {
			t.Errorf("--metrics-addr %d listens on %q, want 127.0.0.1 only", port, out)
		}
	}
	_, stderr := run(t, 2, ffcvfs, "mount", "--metrics-addr", "localhost:http", beton, t.TempDir())
	if !strings.Contains(stderr, "--metrics-addr") {
		t.Errorf("a bad --metrics-addr: %q, want an error naming the flag", stderr)
	}
}

// netstatListeners returns the local addresses of the TCP sockets that
// listen on port, from /proc/net/tcp and tcp6.
func netstatListeners(t *testing.T, port int) string {
	t.Helper()
	var out []string
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n")[1:] {
			fields := strings.Fields(l)
			if len(fields) < 4 || fields[3] != "0A" { // LISTEN
				continue
			}
			hostHex, portHex, _ := strings.Cut(fields[1], ":")
			p, _ := strconv.ParseUint(portHex, 16, 16)
			if int(p) != port {
				continue
			}
			if len(hostHex) == 8 {
				var ip [4]byte
				for i := 0; i < 4; i++ {
					v, _ := strconv.ParseUint(hostHex[2*(3-i):2*(3-i)+2], 16, 8)
					ip[i] = byte(v)
				}
				out = append(out, fmt.Sprintf("%s:%d", net.IP(ip[:]), p))
			} else {
				out = append(out, fmt.Sprintf("[%s]:%d", hostHex, p))
			}
		}
	}
	return strings.Join(out, " ")
}
