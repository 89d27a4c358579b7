package integration

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/internal/peerstats"
	"github.com/ffcvfs/ffcvfs/internal/testenv"
	"github.com/ffcvfs/ffcvfs/internal/toxitest"
)

// Peer tier tests: mounts of one beton in versitygw as nodes of a cluster
// on loopback addresses of their own (127.77.0.N), with fixed ports so
// that the pages' owners are the same in every run.

const peerPort = "17480"

func peerAddr(n int) string { return fmt.Sprintf("127.77.0.%d:%s", n, peerPort) }

func peerURL(n int) string { return "http://" + peerAddr(n) }

// peerSecret writes a secret file of the mount's owner.
func peerSecret(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "peer-secret")
	if err := os.WriteFile(p, []byte("s3cr3t-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// peerMount mounts r's beton as node n of peers, with a RAM cache too
// small for the beton, and more flags.
func (r *storageRig) peerMount(t *testing.T, n int, peers []string, secret string, more ...string) *mountProc {
	t.Helper()
	return r.mount(t, r.srv.Endpoint(), r.key, append([]string{"--cache-size", "4MiB",
		"--peer-listen", peerAddr(n), "--peers", strings.Join(peers, ","), "--peer-secret-file", secret, "--peer-cache-size", "64MiB"}, more...)...)
}

// writePeersFile writes the URLs of nodes ns to a peers file, whole: a
// new file renamed into place.
func writePeersFile(t *testing.T, file string, ns ...int) {
	t.Helper()
	var b strings.Builder
	for _, n := range ns {
		b.WriteString(peerURL(n) + "\n")
	}
	if err := os.WriteFile(file+".new", []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(file+".new", file); err != nil {
		t.Fatal(err)
	}
}

func peerStorageBytes(t *testing.T, ps ...*mountProc) (sum uint64) {
	t.Helper()
	for _, p := range ps {
		st := mustStorageStats(t, p.mnt)
		if st.Peers == nil {
			t.Fatalf("%s: stats.json has no peers section", p.mnt)
		}
		sum += st.Peers.StorageBytes
	}
	return sum
}

// TestPeerTier: three nodes read each page from S3 once in the first
// epoch between them, nothing in the second, right bytes throughout; a
// request without the secret is refused; a node killed mid-epoch leaves
// the others reading right bytes from S3, without an error.
func TestPeerTier(t *testing.T) {
	r := newStorageRig(t, testenv.Fixture(t, "imagefolder-small"), "peers.beton", "2MiB")
	secret := peerSecret(t)
	peers := []string{peerURL(1), peerURL(2), peerURL(3)}
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	nodes := []*mountProc{r.peerMount(t, 1, peers, secret, "--metrics-addr", metricsAddr), r.peerMount(t, 2, peers, secret), r.peerMount(t, 3, peers, secret)}
	readEpochsOnce(t, r, nodes, 2)
	var served int64
	for _, p := range nodes {
		st := mustStorageStats(t, p.mnt).Peers
		served += st.ServerRequests
		if st.Corrupt != 0 || st.PeerErrors != 0 {
			t.Errorf("%s: %+v, want no corrupt values and no peer errors", p.mnt, st)
		}
		// Every storage read is its node's share of the pages, and its
		// memory for the cluster holds those pages and no others.
		checkStorageReasons(t, p.mnt, *st, peerstats.ReasonOwned)
		if most := st.PagesOwned * (2<<20 + 128); st.CacheBytes > most { // a page, its tag and key
			t.Errorf("%s: keeps %d bytes for the cluster, more than its %d pages' %d", p.mnt, st.CacheBytes, st.PagesOwned, most)
		}
	}
	if served == 0 {
		t.Error("no node served another")
	}
	// The metrics say what stats.json does; promtool accepts them.
	exposition := promtoolCheck(t, metricsAddr)
	st := mustStorageStats(t, nodes[0].mnt).Peers
	for name, want := range map[string]uint64{"ffcvfs_peer_read_bytes_total": st.BytesRead, "ffcvfs_peer_storage_read_bytes_total": st.StorageBytes} {
		if line := fmt.Sprintf("\n%s %d\n", name, want); !strings.Contains(exposition, line) && !strings.Contains(exposition, fmt.Sprintf("\n%s %g\n", name, float64(want))) {
			t.Errorf("metrics: no line %q", strings.TrimSpace(line))
		}
	}
	if line := fmt.Sprintf("\nffcvfs_peer_storage_reads_total{reason=\"owned\"} %d\n", st.StorageReasons[peerstats.ReasonOwned]); !strings.Contains(exposition, line) {
		t.Errorf("metrics: no line %q", strings.TrimSpace(line))
	}

	// Without the secret, or with another: refused.
	for _, auth := range []string{"", "Bearer wrong-secret-0123456789"} {
		req, _ := http.NewRequest("GET", peerURL(1)+"/ffcvfs-peer/pages/x", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("a request with Authorization %q: %s, want 401", auth, resp.Status)
		}
	}

	// Node 3 killed while 1 and 2 read: they finish, right bytes.
	var wg sync.WaitGroup
	var errs atomic.Int32
	started := make(chan struct{}, 2)
	for _, p := range nodes[:2] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, sf := range r.files {
				if i == len(r.files)/4 {
					started <- struct{}{}
				}
				if err := checkRead(p.mnt, sf); err != nil {
					t.Errorf("after a peer was killed: %v", err)
					errs.Add(1)
				}
			}
		}()
	}
	<-started
	<-started
	owned := mustStorageStats(t, nodes[2].mnt).Peers.PagesOwned
	before := peerStorageBytes(t, nodes[:2]...)
	nodes[2].cmd.Process.Kill()
	<-nodes[2].exited
	forceUnmount(nodes[2].mnt)
	wg.Wait()
	// The dead node's pages: from storage once for the cluster, by the
	// node next on the ring, not once per survivor.
	got := peerStorageBytes(t, nodes[:2]...) - before
	t.Logf("after a node owning %d pages was killed, the survivors read %d bytes from S3 (%.2f pages)", owned, got, float64(got)/float64(2<<20))
	if owned == 0 || got > uint64(owned)*(2<<20) {
		t.Errorf("after a node owning %d pages of 2 MiB was killed, the survivors read %d bytes from S3, want at most its pages' %d", owned, got, owned*(2<<20))
	}
	for _, p := range nodes[:2] {
		checkReadsAll(t, p.mnt, r.files, 1)
		st := mustStorageStats(t, p.mnt)
		if st.Reads.Errors != 0 {
			t.Errorf("%s: %d reads failed after a peer was killed", p.mnt, st.Reads.Errors)
		}
		checkStorageReasons(t, p.mnt, *st.Peers, peerstats.ReasonOwned, peerstats.ReasonOwnerGone)
	}
}

// readEpochsOnce reads every file on each node, with readers goroutines,
// twice: the nodes must read each page from S3 once between them in the
// first epoch (at most 1.05× the beton) and nothing (1 %) in the second.
func readEpochsOnce(t *testing.T, r *storageRig, nodes []*mountProc, readers int) {
	t.Helper()
	size := uint64(len(r.data))
	for epoch := 1; epoch <= 2; epoch++ {
		before := peerStorageBytes(t, nodes...)
		for _, p := range nodes {
			checkReadsAll(t, p.mnt, r.files, readers)
		}
		got := peerStorageBytes(t, nodes...) - before
		t.Logf("epoch %d: the nodes read %d bytes from S3 for a beton of %d", epoch, got, size)
		if epoch == 1 && got > size*105/100 {
			t.Errorf("epoch 1: the nodes read %d bytes from S3, want at most 1.05× the beton's %d", got, size)
		}
		if epoch == 2 && got > size/100 {
			t.Errorf("epoch 2: the nodes read %d bytes from S3, want at most 1%% of %d", got, size)
		}
	}
}

// checkStorageReasons fails the test unless st's storage reasons name
// every reason, sum to its storage reads, and count reads for no reason
// but those allowed.
func checkStorageReasons(t *testing.T, mnt string, st peerstats.Stats, allowed ...string) {
	t.Helper()
	var sum uint64
	for _, why := range []string{peerstats.ReasonOwned, peerstats.ReasonOwnerTimeout, peerstats.ReasonOwnerGone, peerstats.ReasonOwnerError, peerstats.ReasonCorrupt} {
		n, ok := st.StorageReasons[why]
		if !ok || n > 0 && !slices.Contains(allowed, why) {
			t.Errorf("%s: storage_reasons %v, want reads for %v alone (every reason named)", mnt, st.StorageReasons, allowed)
			return
		}
		sum += n
	}
	if sum != st.StorageReads {
		t.Errorf("%s: storage_reasons %v sum to %d, storage_reads %d", mnt, st.StorageReasons, sum, st.StorageReads)
	}
}

// TestPeerTierCorruptPeer: a peer that answers with bytes that fail their
// check is caught, and one that never answers is given up after
// --peer-timeout; the node reads those pages from S3, right bytes.
func TestPeerTierCorruptPeer(t *testing.T) {
	r := newStorageRig(t, testenv.Fixture(t, "imagefolder-small"), "peers-corrupt.beton", "2MiB")
	secret := peerSecret(t)
	// Node 7 is a fake peer that answers every request with garbage, in
	// groupcache's protocol (a GetResponse whose value is field 1).
	ln, err := net.Listen("tcp", peerAddr(7))
	if err != nil {
		t.Fatal(err)
	}
	var asked atomic.Int32
	var hang atomic.Bool
	fake := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		asked.Add(1)
		if hang.Load() {
			<-req.Context().Done() // a peer that never answers
			return
		}
		value := bytes.Repeat([]byte{0x5a}, 1000)
		msg := []byte{0x0a, 0xe8, 0x07} // field 1, length 1000 as a varint
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(append(msg, value...))
	}), ReadHeaderTimeout: time.Minute}
	go fake.Serve(ln)
	t.Cleanup(func() { fake.Close() })

	p := r.peerMount(t, 4, []string{peerURL(4), peerURL(7)}, secret)
	checkReadsAll(t, p.mnt, r.files, 2)
	st := mustStorageStats(t, p.mnt).Peers
	t.Logf("the fake peer was asked %d times: %+v", asked.Load(), st)
	if asked.Load() == 0 {
		t.Fatal("the fake peer owns no page: pick other addresses")
	}
	if st.Corrupt == 0 || st.StorageBytes == 0 {
		t.Errorf("after a peer sent garbage: %+v, want corrupt values caught and read from S3", st)
	}
	// Garbage, then (held down after it) gone until asked again.
	if st.StorageReasons[peerstats.ReasonCorrupt] == 0 {
		t.Errorf("after a peer sent garbage: storage_reasons %v, want corrupt_value counted", st.StorageReasons)
	}
	checkStorageReasons(t, p.mnt, *st, peerstats.ReasonOwned, peerstats.ReasonCorrupt, peerstats.ReasonOwnerGone)
	p.stop(t)

	// The same peer silent: past --peer-timeout the node reads from S3.
	hang.Store(true)
	asked.Store(0)
	p = r.mount(t, r.srv.Endpoint(), r.key, "--cache-size", "4MiB", "--peer-listen", peerAddr(4),
		"--peers", peerURL(4)+","+peerURL(7), "--peer-secret-file", secret, "--peer-timeout", "300ms")
	checkReadsAll(t, p.mnt, r.files, 2)
	st = mustStorageStats(t, p.mnt).Peers
	if asked.Load() == 0 || st.PeerErrors == 0 {
		t.Errorf("a silent peer asked %d times: %+v, want its requests timed out and counted", asked.Load(), st)
	}
	checkStorageReasons(t, p.mnt, *st, peerstats.ReasonOwned, peerstats.ReasonOwnerTimeout, peerstats.ReasonOwnerGone)
	if st.StorageReasons[peerstats.ReasonOwnerTimeout] == 0 {
		t.Errorf("a silent peer: storage_reasons %v, want owner_timeout counted", st.StorageReasons)
	}
	if ps := mustStorageStats(t, p.mnt); ps.Reads.Errors != 0 {
		t.Errorf("%d reads failed with a silent peer", ps.Reads.Errors)
	}
}

// TestPeerTierRefusesAllInterfaces: --peer-listen without a host is
// refused with a sentence; the secret is required, and its file must be
// the owner's alone.
func TestPeerTierRefusesAllInterfaces(t *testing.T) {
	mnt := t.TempDir()
	src := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	_, stderr := run(t, 2, binary(t, "ffcvfs"), "mount", "--peer-listen", ":"+peerPort, "--peers", "http://127.0.0.1:"+peerPort, src, mnt)
	if !strings.Contains(stderr, "give the address to bind") {
		t.Errorf("--peer-listen :%s: %q, want it refused", peerPort, stderr)
	}
	_, stderr = run(t, 2, binary(t, "ffcvfs"), "mount", "--peer-listen", peerAddr(9), "--peers", peerURL(9), src, mnt)
	if !strings.Contains(stderr, "shared secret") {
		t.Errorf("no secret: %q, want it refused", stderr)
	}
	open := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(open, []byte("s3cr3t-0123456789abcdef"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr = run(t, 2, binary(t, "ffcvfs"), "mount", "--peer-listen", peerAddr(9), "--peers", peerURL(9), "--peer-secret-file", open, src, mnt)
	if !strings.Contains(stderr, "readable by others") {
		t.Errorf("a secret file others can read: %q, want it refused", stderr)
	}
}

// TestPeerTLS: with --peer-tls-*, two nodes share pages over mutual TLS
// (right bytes, values served, no failure). A client whose certificate
// another CA signed, one without a certificate, and plain HTTP get no
// page; a third node with the secret but another CA's certificate is
// refused by both (they serve it nothing) and reads its pages from S3,
// right bytes.
func TestPeerTLS(t *testing.T) {
	r := newStorageRig(t, testenv.Fixture(t, "imagefolder-small"), "peers-tls.beton", "2MiB")
	secret := peerSecret(t)
	ca := testenv.NewCA(t, "cluster")
	https := func(n int) string { return "https://" + peerAddr(n) }
	tlsFlags := func(ca *testenv.CA, n int) []string {
		cert, key := ca.Issue(t, fmt.Sprintf("node%d", n), fmt.Sprintf("127.77.0.%d", n))
		return []string{"--peer-tls-cert", cert, "--peer-tls-key", key, "--peer-tls-ca", ca.File}
	}
	peers := []string{https(1), https(2)}
	nodes := []*mountProc{r.peerMount(t, 1, peers, secret, tlsFlags(ca, 1)...), r.peerMount(t, 2, peers, secret, tlsFlags(ca, 2)...)}
	for _, p := range nodes {
		checkReadsAll(t, p.mnt, r.files, 2)
	}
	var loads, served int64
	for _, p := range nodes {
		st := mustStorageStats(t, p.mnt).Peers
		loads += st.PeerLoads
		served += st.ServerRequests
		if st.PeerErrors != 0 || st.Corrupt != 0 {
			t.Errorf("%s over TLS: %+v, want no peer errors and no corrupt values", p.mnt, st)
		}
		checkStorageReasons(t, p.mnt, *st, peerstats.ReasonOwned)
	}
	if loads == 0 || served == 0 {
		t.Fatalf("over TLS: %d values loaded from peers, %d requests served; want pages to cross", loads, served)
	}

	other := testenv.NewCA(t, "other")
	pool := x509.NewCertPool()
	b, _ := os.ReadFile(ca.File)
	pool.AppendCertsFromPEM(b)
	cert, key := other.Issue(t, "intruder", "127.0.0.1")
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	for name, certs := range map[string][]tls.Certificate{"another CA's certificate": {pair}, "no certificate": nil} {
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: certs}}}
		resp, err := c.Get(https(1) + "/ffcvfs-peer/pages/x")
		if err == nil {
			resp.Body.Close()
			t.Errorf("a client with %s: %s, want the handshake refused", name, resp.Status)
		} else {
			t.Logf("a client with %s: %v", name, err)
		}
	}
	if resp, err := http.Get("http://" + peerAddr(1) + "/ffcvfs-peer/pages/x"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("plain HTTP to a TLS peer: %s", resp.Status)
		}
	}

	intruder := r.peerMount(t, 3, []string{https(1), https(2), https(3)}, secret, tlsFlags(other, 3)...)
	checkReadsAll(t, intruder.mnt, r.files, 2)
	st := mustStorageStats(t, intruder.mnt).Peers
	if st.PeerLoads != 0 || st.PeerErrors == 0 {
		t.Errorf("a node with another CA's certificate: %+v, want every request to a peer refused", st)
	}
	checkStorageReasons(t, intruder.mnt, *st, peerstats.ReasonOwned, peerstats.ReasonOwnerGone)
	var after int64
	for _, p := range nodes {
		after += mustStorageStats(t, p.mnt).Peers.ServerRequests
	}
	if after != served {
		t.Errorf("the nodes served %d requests after the intruder came, want none", after-served)
	}
}

// TestPeerMembership: three nodes follow a peers file. After a full epoch,
// midway through the next, the file gains a fourth node and loses the
// third, which then stops: the nodes take the new members, every byte is
// right, and the storage reads after the change are no more than the
// pages whose owner changed (+1 %): each read once, by its new owner.
func TestPeerMembership(t *testing.T) {
	r := newStorageRig(t, testenv.Fixture(t, "imagefolder-small"), "peers-members.beton", "2MiB")
	secret := peerSecret(t)
	file := filepath.Join(t.TempDir(), "peers.txt")
	writePeers := func(ns ...int) { writePeersFile(t, file, ns...) }
	writePeers(1, 2, 3)
	nodes := map[int]*mountProc{}
	for n := 1; n <= 3; n++ {
		nodes[n] = r.peerMount(t, n, []string{"@" + file}, secret)
	}
	for n := 1; n <= 3; n++ {
		checkReadsAll(t, nodes[n].mnt, r.files, 2)
	}
	for _, sf := range r.files[:len(r.files)/2] {
		for _, n := range []int{1, 2} {
			if err := checkRead(nodes[n].mnt, sf); err != nil {
				t.Fatal(err)
			}
		}
	}

	writePeers(1, 2, 4)
	nodes[4] = r.peerMount(t, 4, []string{"@" + file}, secret)
	for _, n := range []int{1, 2} {
		waitLog(t, nodes[n], "peer tier: the members changed", 1)
		if st := mustStorageStats(t, nodes[n].mnt).Peers; st.Members != 3 || st.MemberChanges != 1 {
			t.Fatalf("node %d: %d members after %d changes, want 3 after 1", n, st.Members, st.MemberChanges)
		}
	}
	nodes[3].stop(t)
	moved := mustStorageStats(t, nodes[1].mnt).Peers.PagesMoved
	if m2 := mustStorageStats(t, nodes[2].mnt).Peers.PagesMoved; m2 != moved || moved == 0 {
		t.Fatalf("pages moved: %d on node 1, %d on node 2", moved, m2)
	}
	live := []*mountProc{nodes[1], nodes[2], nodes[4]}
	before := peerStorageBytes(t, live...)
	for _, sf := range r.files[len(r.files)/2:] {
		for _, n := range []int{1, 2} {
			if err := checkRead(nodes[n].mnt, sf); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, p := range live {
		checkReadsAll(t, p.mnt, r.files, 2)
	}
	got := peerStorageBytes(t, live...) - before
	bound := uint64(moved) * (2 << 20) * 101 / 100
	t.Logf("%d pages changed owner; the nodes read %d bytes (%.2f pages) from S3 after the change", moved, got, float64(got)/float64(2<<20))
	if got > bound {
		t.Errorf("after the members changed, the nodes read %d bytes from S3, want at most %d (%d pages moved, +1%%)", got, bound, moved)
	}
	var owned int64
	for _, p := range live {
		st := mustStorageStats(t, p.mnt)
		owned += st.Peers.PagesOwned
		if st.Reads.Errors != 0 || st.Peers.Corrupt != 0 {
			t.Errorf("%s: %d read errors, %d corrupt values", p.mnt, st.Reads.Errors, st.Peers.Corrupt)
		}
		checkStorageReasons(t, p.mnt, *st.Peers, peerstats.ReasonOwned)
	}
	if pages := int64(len(r.data)+2<<20-1) / (2 << 20); owned != pages {
		t.Errorf("after the change the live nodes own %d pages, want the beton's %d", owned, pages)
	}
}

// TestPeerTierDisk: with --disk-cache and no --peer-cache-size, a node
// keeps the pages it owns in its disk tier, first of all pages, and
// serves its peers from its slots and that tier: the tier's memory holds
// nothing, the three nodes' RAM together holds less than the beton, and
// yet, after the first epoch reads each page from S3 once, the next reads
// nothing from S3.
func TestPeerTierDisk(t *testing.T) {
	// The fixture's photos, four times each: 13 pages of 2 MiB.
	src := filepath.Join(t.TempDir(), "photos")
	fixture := testenv.Fixture(t, "imagefolder-small")
	classes, err := os.ReadDir(fixture)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range classes {
		photos, err := os.ReadDir(filepath.Join(fixture, c.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(src, c.Name()), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, p := range photos {
			b, err := os.ReadFile(filepath.Join(fixture, c.Name(), p.Name()))
			if err != nil {
				t.Fatal(err)
			}
			for k := range 4 {
				if err := os.WriteFile(filepath.Join(src, c.Name(), fmt.Sprintf("%d-%s", k, p.Name())), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	r := newStorageRig(t, src, "peers-disk.beton", "2MiB")
	size := uint64(len(r.data))
	const ram = 6 << 20 // 3 pages: a slot and 2 fill buffers
	if 3*ram >= size {
		t.Fatalf("a beton of %d bytes: the nodes' RAM, 3 × %d, holds it", size, ram)
	}
	secret := peerSecret(t)
	peers := []string{peerURL(1), peerURL(2), peerURL(3)}
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	var nodes []*mountProc
	for n := 1; n <= 3; n++ {
		args := []string{"--cache-size", fmt.Sprint(ram), "--disk-cache", t.TempDir(), "--disk-cache-size", "20MiB",
			"--peer-listen", peerAddr(n), "--peers", strings.Join(peers, ","), "--peer-secret-file", secret}
		if n == 1 {
			args = append(args, "--metrics-addr", metricsAddr)
		}
		nodes = append(nodes, r.mount(t, r.srv.Endpoint(), r.key, args...))
	}
	readEpochsOnce(t, r, nodes, 1)
	var held uint64
	var owned, most int64
	for _, p := range nodes {
		st := mustStorageStats(t, p.mnt)
		held += st.Peers.HeldReads
		owned += st.Peers.PagesOwned
		most = max(most, st.Peers.PagesOwned)
		t.Logf("%s: owns %d pages, served %d values from its slots and disk tier; %d bytes in the tier's memory", p.mnt, st.Peers.PagesOwned, st.Peers.HeldReads, st.Peers.CacheBytes)
		if st.Peers.CacheBytes != 0 || st.Peers.Corrupt != 0 || st.Peers.PeerErrors != 0 || st.Reads.Errors != 0 {
			t.Errorf("%s: %+v, %d read errors: want no bytes in the tier's memory, no corrupt values, no errors", p.mnt, *st.Peers, st.Reads.Errors)
		}
		checkStorageReasons(t, p.mnt, *st.Peers, peerstats.ReasonOwned)
	}
	st := mustStorageStats(t, nodes[0].mnt).Peers
	exposition := promtoolCheck(t, metricsAddr)
	for _, line := range []string{fmt.Sprintf("\nffcvfs_peer_held_reads_total %d\n", st.HeldReads), "\nffcvfs_peer_cache_bytes 0\n"} {
		if !strings.Contains(exposition, line) {
			t.Errorf("metrics: no line %q", strings.TrimSpace(line))
		}
	}
	if pages := int64(size+2<<20-1) / (2 << 20); held == 0 || owned != pages || most*(2<<20) <= ram {
		t.Errorf("the nodes served %d values from their slots and disk tiers and own %d pages, at most %d each: want some, %d, and a node owning more than its %d bytes of RAM", held, owned, most, pages, ram)
	}
}

// TestPeerOwnerFillsSlowly: an owner reading a page from S3 takes longer
// than --peer-timeout (2 s of latency against 1 s); it says at once
// that it works on the answer, so the node that asked waits for it rather
// than read the page from S3 too: each page is read from S3 once.
func TestPeerOwnerFillsSlowly(t *testing.T) {
	r := newStorageRig(t, testenv.Fixture(t, "imagefolder-small"), "peers-slow-fill.beton", "2MiB")
	secret := peerSecret(t)
	px := r.tp.Proxy(t, "slow-fill", r.serverAddr())
	peers := []string{peerURL(1), peerURL(2)}
	var nodes []*mountProc
	for n := 1; n <= 2; n++ {
		nodes = append(nodes, r.mount(t, "http://"+px.Addr(), r.key, "--cache-size", "4MiB", "--peer-timeout", "1s",
			"--peer-listen", peerAddr(n), "--peers", strings.Join(peers, ","), "--peer-secret-file", secret, "--peer-cache-size", "64MiB"))
	}
	px.AddToxic(t, toxitest.Toxic{Name: "latency", Type: "latency", Attributes: map[string]int64{"latency": 2000}})
	// Node 2 alone reads: node 1 fills its pages from S3 as node 2 asks.
	checkReadsAll(t, nodes[1].mnt, r.files, 2)
	size := uint64(len(r.data))
	got := peerStorageBytes(t, nodes...)
	owned := mustStorageStats(t, nodes[0].mnt).Peers.PagesOwned
	t.Logf("the nodes read %d bytes from S3 for a beton of %d; node 1 owns %d pages", got, size, owned)
	if owned == 0 {
		t.Fatal("node 1 owns no page: pick other addresses")
	}
	if got > size*105/100 {
		t.Errorf("the nodes read %d bytes from S3, want at most 1.05× the beton's %d", got, size)
	}
	for _, p := range nodes {
		checkStorageReasons(t, p.mnt, *mustStorageStats(t, p.mnt).Peers, peerstats.ReasonOwned)
	}
}

// TestPeerBudgetTooSmall: a node whose share of the pages is more than it
// can keep says so in its log, at the start and again when the members
// change, naming its share, the flag that sizes what keeps it
// (--peer-cache-size, or --disk-cache-size when its disk tier keeps them)
// and the size that would hold it; a node with room says nothing.
func TestPeerBudgetTooSmall(t *testing.T) {
	r := newStorageRig(t, testenv.Fixture(t, "imagefolder-small"), "peers-budget.beton", "2MiB")
	secret := peerSecret(t)
	file := filepath.Join(t.TempDir(), "peers.txt")
	writePeers := func(ns ...int) { writePeersFile(t, file, ns...) }
	// want is the line a node owning its share now logs.
	want := func(p *mountProc, flag string, keeps int) string {
		owned := mustStorageStats(t, p.mnt).Peers.PagesOwned
		if owned == 0 {
			t.Fatalf("%s owns no page", p.mnt)
		}
		if owned < 2 {
			t.Fatalf("%s owns %d page: the test needs a share of more than a page", p.mnt, owned)
		}
		return fmt.Sprintf("this node owns %d pages of s3://%s/%s (%d MiB) among", owned, storageBucket, r.key, owned*2) +
			fmt.Sprintf("%s %d MiB keeps", flag, keeps) + fmt.Sprintf("%s %dMiB would hold them", flag, owned*2+4)
	}
	check := func(p *mountProc, line string, n int) {
		t.Helper()
		parts := strings.SplitAfter(line, " among")
		rest := strings.SplitAfter(parts[1], " keeps")
		waitLog(t, p, parts[0], n)
		for _, s := range []string{rest[0], rest[1]} {
			if !strings.Contains(p.stderr.String(), s) {
				t.Errorf("%s: no %q in its log:\n%s", p.mnt, s, p.stderr)
			}
		}
	}

	// Two nodes, one of which never comes: this one's share, about 3 of
	// the 6 pages, in a page's 2 MiB.
	writePeers(1, 2)
	p := r.mount(t, r.srv.Endpoint(), r.key, "--cache-size", "4MiB", "--peer-listen", peerAddr(1), "--peers", "@"+file,
		"--peer-secret-file", secret, "--peer-cache-size", "2MiB")
	check(p, want(p, "--peer-cache-size", 2), 1)
	// The members change: its share grows, and it says so again.
	writePeers(1)
	waitLog(t, p, "peer tier: the members changed", 1)
	check(p, want(p, "--peer-cache-size", 2), 1)
	p.stop(t)

	// Less than a page: a mistake in the flag.
	cmd := exec.Command(binary(t, "ffcvfs"), "mount", "--classes", r.classes, "--s3-endpoint", r.srv.Endpoint(), "--s3-path-style",
		"--peer-listen", peerAddr(1), "--peers", peerURL(1), "--peer-secret-file", secret, "--peer-cache-size", "1MiB",
		"s3://"+storageBucket+"/"+r.key, t.TempDir())
	cmd.Env = append(os.Environ(), r.srv.Env()...)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "--peer-cache-size 1 MiB holds no page") {
		t.Errorf("--peer-cache-size under a page: %v\n%s\nwant exit status 2 and a sentence naming the flag", err, out)
	}

	// Its disk tier keeps them: the disk's flag.
	p = r.mount(t, r.srv.Endpoint(), r.key, "--cache-size", "8MiB", "--disk-cache", t.TempDir(), "--disk-cache-size", "2MiB",
		"--peer-listen", peerAddr(1), "--peers", "@"+file, "--peer-secret-file", secret)
	check(p, want(p, "--disk-cache-size", 2), 1)
	p.stop(t)

	// Room for its share: nothing said.
	p = r.mount(t, r.srv.Endpoint(), r.key, "--cache-size", "4MiB", "--peer-listen", peerAddr(1), "--peers", "@"+file,
		"--peer-secret-file", secret, "--peer-cache-size", "64MiB")
	checkReadsAll(t, p.mnt, r.files, 2)
	if strings.Contains(p.stderr.String(), "would hold them") {
		t.Errorf("a node with room for its share warns:\n%s", p.stderr)
	}
}

// TestPeerUndersizedReadsOncePerEpoch: a node whose --peer-cache-size holds
// less than its share reads about its share's bytes from storage for an
// epoch of another node's reads, as its warning says ("read from storage
// again each epoch"): a range asked of a page it cannot keep is read as a
// range, and a page asked again lately whole, kept, displacing the one it
// owns that was used least lately. It kept no page once full, and read a
// whole page from storage for every range asked (the owner of 166 pages
// made 4,521 page reads for one epoch): here 70 pages for a share of 9.
func TestPeerUndersizedReadsOncePerEpoch(t *testing.T) {
	src := filepath.Join(t.TempDir(), "blobs.beton")
	const perPage = 8
	writeBlobBeton(t, src, perPage*24, beton.MinPageSize, perPage) // 24 pages
	secret := peerSecret(t)
	peers := peerURL(1) + "," + peerURL(2)
	owner := startMount(t, nil, src, "--cache-size", "4MiB", "--peer-listen", peerAddr(1), "--peers", peers,
		"--peer-secret-file", secret, "--peer-cache-size", "2MiB")
	reader := startMount(t, nil, src, "--cache-size", "4MiB", "--peer-listen", peerAddr(2), "--peers", peers,
		"--peer-secret-file", secret, "--peer-cache-size", "64MiB")
	owned := mustStorageStats(t, owner.mnt).Peers.PagesOwned
	if owned < 4 {
		t.Fatalf("node 1 owns %d pages: the test needs more than its --peer-cache-size holds", owned)
	}
	share := uint64(owned) * beton.MinPageSize
	// By class, samples i, i+10, ...: from page to page, as a random
	// order goes; then by sample, page after page, as orders by pages go.
	byClass := mountedFiles(t, reader.mnt)
	byPage := slices.Clone(byClass)
	slices.SortFunc(byPage, func(a, b string) int { return strings.Compare(filepath.Base(a), filepath.Base(b)) })
	for _, pass := range []struct {
		name  string
		files []string
		bytes uint64 // at most, in 1/100 of the share
		reads uint64 // at most, a page; 0: any (a range a read)
	}{{"random", byClass, 100, 0}, {"by pages", byPage, 115, 2}} {
		before := mustStorageStats(t, owner.mnt).Peers
		for _, f := range pass.files {
			if _, err := os.ReadFile(filepath.Join(reader.mnt, f)); err != nil {
				t.Fatal(err)
			}
		}
		after := mustStorageStats(t, owner.mnt).Peers
		reads := after.StorageReasons[peerstats.ReasonOwned] - before.StorageReasons[peerstats.ReasonOwned]
		bytes := after.StorageBytes - before.StorageBytes
		t.Logf("%s: the owner of %d pages read %d times from storage, %.2f× its share's bytes", pass.name, owned, reads, float64(bytes)/float64(share))
		if bytes > share*pass.bytes/100 || pass.reads > 0 && reads > pass.reads*uint64(owned) {
			t.Errorf("%s: the owner of %d pages, with room for one, read %d times from storage, %d bytes; want at most %d reads and %d%% of its share's %d bytes",
				pass.name, owned, reads, bytes, pass.reads*uint64(owned), pass.bytes, share)
		}
	}
}

// TestPeerSecretsDiffer: nodes with different secrets share nothing, and
// say so once each, naming the cause: the asker that its requests are
// refused, the owner that it refuses them. They read from storage with no
// word (120 storage reads, 90 owner errors, no warning).
func TestPeerSecretsDiffer(t *testing.T) {
	src := filepath.Join(t.TempDir(), "blobs.beton")
	writeBlobBeton(t, src, 8*12, beton.MinPageSize, 8)
	other := filepath.Join(t.TempDir(), "other-secret")
	if err := os.WriteFile(other, []byte("another-s3cr3t-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	peers := peerURL(1) + "," + peerURL(2)
	a := startMount(t, nil, src, "--cache-size", "4MiB", "--peer-listen", peerAddr(1), "--peers", peers, "--peer-secret-file", peerSecret(t))
	b := startMount(t, nil, src, "--cache-size", "4MiB", "--peer-listen", peerAddr(2), "--peers", peers, "--peer-secret-file", other)
	for range 2 {
		for _, p := range []*mountProc{a, b} {
			for _, f := range mountedFiles(t, p.mnt) {
				if _, err := os.ReadFile(filepath.Join(p.mnt, f)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for _, p := range []*mountProc{a, b} {
		log := p.stderr.String()
		if strings.Count(log, "refuses this node's requests") != 1 || !strings.Contains(log, "secret is not the peer's") ||
			strings.Count(log, "refused the requests of a node: its secret is not this node's") != 1 {
			t.Errorf("%s's log:\n%s\nwant the refusals said once each way, naming the secret", p.mnt, log)
		}
	}
}

// TestPeerManyDeadMembers: three live nodes listed among 120 dead ones
// serve each other once they have found the dead ones out, and each warns
// of failed peers a few times, not once a failure. Among 4,093 dead
// members the live ones never served each other (a read asked two nodes,
// each dead one was tried again every 10 s) and logged 182 warnings in 3 s.
func TestPeerManyDeadMembers(t *testing.T) {
	src := filepath.Join(t.TempDir(), "blobs.beton")
	writeBlobBeton(t, src, 8*24, beton.MinPageSize, 8)
	secret := peerSecret(t)
	var list []string
	for n := 1; n <= 3; n++ {
		list = append(list, peerURL(n))
	}
	for n := 1; n <= 120; n++ {
		list = append(list, fmt.Sprintf("http://127.77.3.%d:%s", n, peerPort)) // nothing listens there
	}
	file := filepath.Join(t.TempDir(), "peers.txt")
	if err := os.WriteFile(file, []byte(strings.Join(list, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var nodes []*mountProc
	for n := 1; n <= 3; n++ {
		nodes = append(nodes, startMount(t, nil, src, "--cache-size", "4MiB", "--peer-listen", peerAddr(n), "--peers", "@"+file,
			"--peer-secret-file", secret, "--peer-cache-size", "64MiB"))
	}
	var loads int64
	for epoch := 1; epoch <= 4; epoch++ {
		before := int64(0)
		for _, p := range nodes {
			before += mustStorageStats(t, p.mnt).Peers.PeerLoads
		}
		for _, p := range nodes {
			for _, f := range mountedFiles(t, p.mnt) {
				if _, err := os.ReadFile(filepath.Join(p.mnt, f)); err != nil {
					t.Fatal(err)
				}
			}
		}
		loads = 0
		for _, p := range nodes {
			loads += mustStorageStats(t, p.mnt).Peers.PeerLoads
		}
		loads -= before
		t.Logf("epoch %d: %d values from live peers", epoch, loads)
	}
	if loads == 0 {
		t.Error("epoch 4: the live nodes served each other nothing")
	}
	for _, p := range nodes {
		if n := logCount(p, "a peer failed"); n > 2*5 {
			t.Errorf("%s warned of failed peers %d times", p.mnt, n)
		}
	}
}
