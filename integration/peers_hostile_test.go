package integration

import (
	"bytes"
	bin "encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ffcvfs/ffcvfs/internal/peerstats"
	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

// Hostile input against the peer tier: a peer listed in
// --peers (node 5, a fake) that forges values, streams an endless answer,
// or sends one a byte at a time, and clients that hold the listener's
// connections. None changes a byte a reader gets or a tier holds, and each
// costs the mount bounded memory and descriptors.

// fakePeer serves node n's address with answer, which sees each request
// and the length of the value its key names (a page, or a range of one),
// and records the requests' raw bytes.
type fakePeer struct {
	asked atomic.Int32
	mu    sync.Mutex
	raw   bytes.Buffer // the requests, as they came
}

func startFakePeer(t *testing.T, n int, r *storageRig, answer func(w http.ResponseWriter, req *http.Request, valueLen int)) *fakePeer {
	t.Helper()
	ln, err := net.Listen("tcp", peerAddr(n))
	if err != nil {
		t.Fatal(err)
	}
	fp := &fakePeer{}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		fp.asked.Add(1)
		var dump bytes.Buffer
		req.Write(&dump)
		fp.mu.Lock()
		fp.raw.Write(dump.Bytes())
		fp.mu.Unlock()
		answer(w, req, peerValueLen(req.URL.Path, int64(len(r.data))))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return fp
}

// peerValueLen is the length of the value a peer key names in a beton of
// size bytes in 2 MiB pages: /ffcvfs-peer/GROUP/PREFIX/PAGE[@OFF+N].
func peerValueLen(path string, size int64) int {
	key := path[strings.LastIndexByte(path, '/')+1:]
	page, rng, isRange := strings.Cut(key, "@")
	if isRange {
		_, n, _ := strings.Cut(rng, "+")
		v, _ := strconv.Atoi(n)
		return v
	}
	p, _ := strconv.ParseInt(page, 10, 64)
	return int(min(2<<20, size-p*(2<<20)))
}

// groupcacheValue writes v as groupcache's GetResponse (field 1, bytes).
func groupcacheValue(w http.ResponseWriter, v []byte) {
	msg := bin.AppendUvarint([]byte{0x0a}, uint64(len(v)))
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(append(msg, v...))
}

// TestPeerForgedValues: a peer that answers every key with
// bytes of the right length and a valid CRC-32C (what the tier checked)
// had every file served forged, and the disk tier kept them. Values carry
// a MAC of the secret now: the forgeries fail it, every byte read is
// right, the disk tier holds only right pages (a remount without peers
// reads them), and the secret is in no request the peer saw.
func TestPeerForgedValues(t *testing.T) {
	r := newStorageRig(t, testenv.Fixture(t, "imagefolder-small"), "peers-forged.beton", "2MiB")
	secret := peerSecret(t)
	fake := startFakePeer(t, 5, r, func(w http.ResponseWriter, req *http.Request, n int) {
		v := bytes.Repeat([]byte{0x5a}, n)
		groupcacheValue(w, bin.LittleEndian.AppendUint32(v, crc32.Checksum(v, crc32.MakeTable(crc32.Castagnoli))))
	})
	disk := filepath.Join(t.TempDir(), "disk-cache")
	p := r.peerMount(t, 4, []string{peerURL(4), peerURL(5)}, secret, "--disk-cache", disk, "--cache-size", "8MiB")
	checkReadsAll(t, p.mnt, r.files, 2)
	st := mustStorageStats(t, p.mnt).Peers
	t.Logf("the forging peer was asked %d times: %+v", fake.asked.Load(), st)
	if fake.asked.Load() == 0 {
		t.Fatal("the fake peer owns no page: pick other addresses")
	}
	if st.Corrupt == 0 {
		t.Errorf("no forged value was caught: %+v", st)
	}
	p.stop(t)
	fake.mu.Lock()
	raw := fake.raw.String()
	fake.mu.Unlock()
	if s, _ := os.ReadFile(secret); strings.Contains(raw, strings.TrimSpace(string(s))) {
		t.Error("the secret crossed the network in a request")
	}
	// The disk tier holds what storage holds: read again without peers.
	p = r.mount(t, r.srv.Endpoint(), r.key, "--cache-size", "8MiB", "--disk-cache", disk)
	checkReadsAll(t, p.mnt, r.files, 1)
	if st := mustStorageStats(t, p.mnt); st.Reads.Errors != 0 {
		t.Errorf("%d reads failed from the disk tier", st.Reads.Errors)
	}
}

// mustPeakRSS is peakRSS, failing the test on an error.
func mustPeakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	n, err := peakRSS(pid)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPeerEndlessAnswer: a peer that streams an endless
// answer took the mount to gigabytes, read whole until the timeout. An
// answer longer than a page and its framing is refused as it arrives;
// the mount's peak resident size stays under 256 MiB, and every byte read
// is right.
func TestPeerEndlessAnswer(t *testing.T) {
	r := newStorageRig(t, testenv.Fixture(t, "imagefolder-small"), "peers-endless.beton", "2MiB")
	secret := peerSecret(t)
	fake := startFakePeer(t, 5, r, func(w http.ResponseWriter, req *http.Request, n int) {
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write([]byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f}) // a value of 4 GiB
		chunk := bytes.Repeat([]byte{0x5a}, 1<<20)
		for req.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	p := r.peerMount(t, 4, []string{peerURL(4), peerURL(5)}, secret, "--peer-timeout", "20s")
	checkReadsAll(t, p.mnt, r.files, 2)
	peak := mustPeakRSS(t, p.cmd.Process.Pid)
	t.Logf("the endless peer was asked %d times; the mount's peak RSS %d MiB", fake.asked.Load(), peak>>20)
	if fake.asked.Load() == 0 {
		t.Fatal("the fake peer owns no page: pick other addresses")
	}
	if peak > 256<<20 {
		t.Errorf("the mount's peak RSS is %d MiB, want under 256 MiB", peak>>20)
	}
}

// TestPeerSlowAnswer: a peer that sends its answer a byte a second, one
// that says it works on the answer (102 Processing) and then sends
// nothing, and one that says so without end, are given up (after --peer-timeout, and 12 times as long) and
// set aside, a timeout while the answer is read as well as before it: it
// is asked a few times, not once per read; the node reads their pages from
// S3, right bytes.
func TestPeerSlowAnswer(t *testing.T) {
	for _, c := range []struct {
		name   string
		answer func(w http.ResponseWriter, req *http.Request, n int)
	}{
		{"a byte a second", func(w http.ResponseWriter, req *http.Request, n int) {
			w.Header().Set("Content-Type", "application/x-protobuf")
			w.WriteHeader(http.StatusOK)
			for req.Context().Err() == nil {
				if _, err := w.Write([]byte{0x0a}); err != nil {
					return
				}
				w.(http.Flusher).Flush()
				select {
				case <-req.Context().Done():
				case <-time.After(time.Second):
				}
			}
		}},
		{"processing, then silence", func(w http.ResponseWriter, req *http.Request, n int) {
			w.WriteHeader(http.StatusProcessing)
			<-req.Context().Done()
		}},
		{"processing without end", func(w http.ResponseWriter, req *http.Request, n int) {
			for req.Context().Err() == nil {
				w.WriteHeader(http.StatusProcessing)
				select {
				case <-req.Context().Done():
				case <-time.After(10 * time.Millisecond):
				}
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newStorageRig(t, testenv.Fixture(t, "imagefolder-small"), "peers-slow.beton", "2MiB")
			secret := peerSecret(t)
			fake := startFakePeer(t, 5, r, c.answer)
			p := r.peerMount(t, 4, []string{peerURL(4), peerURL(5)}, secret, "--peer-timeout", "300ms")
			checkReadsAll(t, p.mnt, r.files, 1)
			asked := fake.asked.Load()
			t.Logf("the slow peer was asked %d times for %d files", asked, len(r.files))
			if asked == 0 {
				t.Fatal("the fake peer owns no page: pick other addresses")
			}
			if asked > 10 {
				t.Errorf("the slow peer was asked %d times; once its answer timed out it should be set aside", asked)
			}
			checkStorageReasons(t, p.mnt, *mustStorageStats(t, p.mnt).Peers, peerstats.ReasonOwned, peerstats.ReasonOwnerTimeout, peerstats.ReasonOwnerGone)
		})
	}
}

// TestPeerListenerFlood: 3,000 connections to a node's peer
// listener, half sending a request line and then nothing, half a whole
// unauthenticated request and then silence, held every connection and took
// the mount to tens of thousands of descriptors. The listener serves at
// most maxConns at once (the rest wait in the kernel's backlog) and drops
// silent ones; the mount's descriptors stay bounded, and its files read
// right meanwhile.
func TestPeerListenerFlood(t *testing.T) {
	r := newStorageRig(t, testenv.Fixture(t, "imagefolder-small"), "peers-flood.beton", "2MiB")
	secret := peerSecret(t)
	p := r.peerMount(t, 6, []string{peerURL(6)}, secret)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range 3000 {
		c, err := net.DialTimeout("tcp", peerAddr(6), testenv.Patience)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
		if i%2 == 0 {
			io.WriteString(c, "GET /ffcvfs-peer/pages/x HTTP/1.1\r\n")
		} else {
			io.WriteString(c, "GET /ffcvfs-peer/pages/x HTTP/1.1\r\nHost: x\r\n\r\n")
		}
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("with 3,000 connections open to its peer listener, the mount has %d descriptors", len(fds))
	if len(fds) > 1024+256 {
		t.Errorf("the mount holds %d descriptors with 3,000 connections open, want at most the listener's bound and its own", len(fds))
	}
	checkReadsAll(t, p.mnt, r.files, 1)
	if peak := mustPeakRSS(t, p.cmd.Process.Pid); peak > 256<<20 {
		t.Errorf("the mount's peak RSS is %d MiB, want under 256 MiB", peak>>20)
	}
}
