package peer

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ffcvfs/ffcvfs/internal/peerstats"
)

// testNode is a node of no tier, which tests register objects with.
var testNode = &Node{objects: map[string]*Object{}}

// testSource registers an object of size bytes in pages of block bytes
// under prefix "t" with testNode, as Node.Open does, without joining a
// tier.
func testSource(t testing.TB, size, block int64) *Object {
	s := &Object{node: testNode, info: Info{Name: "mem://t", Size: size, PageSize: block}, prefix: "t", pages: (size + block - 1) / block}
	testNode.mu.Lock()
	testNode.objects["t"] = s
	testNode.mu.Unlock()
	return s
}

func TestParseKey(t *testing.T) {
	s := testSource(t, 5000, 2048) // pages of 2048, 2048, 904 bytes
	for _, tc := range []struct {
		key        string
		p, off, n  int64
		wantErrSub string
	}{
		{key: "t/0"},
		{key: "t/2", p: 2},
		{key: "t/2@0+903", p: 2, n: 903},
		{key: "t/1@2047+1", p: 1, off: 2047, n: 1},
		{key: "t/3", wantErrSub: "no such page"},
		{key: "t/-1", wantErrSub: "no such page"},
		{key: "t/4503599627370496", wantErrSub: "no such page"}, // ×2048 overflows int64
		{key: "t/2@0+905", wantErrSub: "no such range"},
		{key: "t/1@-1+5", wantErrSub: "no such range"},
		{key: "t/1@5+0", wantErrSub: "no such range"},
		{key: "t/1@9223372036854775807+9223372036854775807", wantErrSub: "no such range"},
		{key: "u/0", wantErrSub: "no such object"},
		{key: "t", wantErrSub: "bad key"},
	} {
		got, p, off, n, err := testNode.parseKey(tc.key)
		switch {
		case tc.wantErrSub != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErrSub) {
				t.Errorf("%q: err %v, want %q", tc.key, err, tc.wantErrSub)
			}
		case err != nil || got != s || p != tc.p || off != tc.off || n != tc.n:
			t.Errorf("%q: %d %d %d %v, want %d %d %d", tc.key, p, off, n, err, tc.p, tc.off, tc.n)
		}
	}
}

// FuzzParseKey: keys come from the network; whatever they hold, a key
// parses to a page and range inside the object, or to an error.
func FuzzParseKey(f *testing.F) {
	for _, k := range []string{"t/0", "t/2@0+904", "t/1@2047+1", "t/9@1+1", "t/1@+", "t//@"} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		s := testSource(t, 5000, 2048)
		_, p, off, n, err := testNode.parseKey(key)
		if err != nil {
			return
		}
		if p < 0 || p >= s.pages || off < 0 || n < 0 || off > s.pageLen(p) || n > s.pageLen(p)-off {
			t.Fatalf("%q: page %d, range %d+%d, outside the object", key, p, off, n)
		}
	})
}

// TestParseKeyCanonical: keys that name a page or a range
// in another spelling (+0, 000, a range that is the whole page) each made
// a cache entry of their own and a storage read; only the spelling
// FormatInt writes is a key.
func TestParseKeyCanonical(t *testing.T) {
	testSource(t, 5000, 2048)
	for _, key := range []string{"t/+0", "t/000", "t/00", "t/01", "t/0@0+2048", "t/2@0+904", "t/1@05+1", "t/1@5+01",
		"t/1@+5+1", "t/1@5++1", "t/1@5+1@", "t/ 1", "t/1@5+1 "} {
		if _, _, _, _, err := testNode.parseKey(key); err == nil {
			t.Errorf("%q parses: one page or range under two keys", key)
		}
	}
}

// TestValueTags: a value's tag is a MAC of the secret over
// its key and bytes: a flipped bit, the value of another key, a value
// tagged with another secret, and one too short to hold a tag all fail,
// where an unkeyed CRC let any peer forge values.
func TestValueTags(t *testing.T) {
	nd := &Node{valueKey: derive("s3cr3t-0123456789abcdef", "ffcvfs peer value")}
	v := nd.sealed("t/0", []byte("page bytes"))
	if b, ok := nd.open("t/0", v); !ok || string(b) != "page bytes" {
		t.Fatalf("open(sealed) = %q, %v", b, ok)
	}
	if _, ok := nd.open("t/1", v); ok {
		t.Error("a value passed as another key's")
	}
	w := append([]byte(nil), v...)
	w[3] ^= 1
	if _, ok := nd.open("t/0", w); ok {
		t.Error("a flipped bit passed the check")
	}
	if _, ok := nd.open("t/0", []byte{1, 2}); ok {
		t.Error("a value shorter than its tag passed the check")
	}
	nd.valueKey = derive("another-secret-0123456789", "ffcvfs peer value")
	if _, ok := nd.open("t/0", v); ok {
		t.Error("a value tagged with another secret passed the check")
	}
}

// FuzzResponseValue: a peer's answer comes from the network; whatever it
// holds, responseValue returns a value or an error, and a GetResponse it
// reads gives back the value written.
func FuzzResponseValue(f *testing.F) {
	f.Add([]byte{0x0a, 0x03, 'a', 'b', 'c'})
	f.Add([]byte{0x0a, 0x03, 'a', 'b', 'c', 0x11, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f})
	f.Add([]byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{0x12, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := responseValue(b)
		if err == nil && len(v) > len(b) {
			t.Fatalf("a value of %d bytes from %d", len(v), len(b))
		}
	})
}

// TestGroupsRefuseOtherKeys: a member holding the secret that asks
// ranges in the pages group (or a page in the ranges group) is refused,
// and nothing is asked of the cache: each of 300 one-byte ranges was filled
// as a whole page under a key of its own (300 storage reads, 600 MiB kept).
// (That the cache reads a page and a range of it from storage once is
// pagecache's TestServePeer.)
func TestGroupsRefuseOtherKeys(t *testing.T) {
	const block = 1 << 20
	nd, err := Start(Options{Listen: "127.0.0.1:0", Peers: []string{"http://127.0.0.1:0"}, Secret: "0123456789abcdef0123"})
	if err != nil {
		t.Fatal(err)
	}
	defer nd.Close()
	s, err := nd.Open(Info{Name: "mem://groups", Identity: "mem://groups v1", Size: 3 * block, PageSize: block})
	if err != nil {
		t.Fatal(err)
	}
	// What the node's cache is asked.
	var asked atomic.Int64
	s.Serve(func(ctx context.Context, p, off int64, b []byte) error {
		asked.Add(1)
		return nil
	})
	ask := func(group, key string) int {
		path := basePath + group + "/" + key
		req, err := http.NewRequest(http.MethodGet, "http://"+nd.Addr()+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(authHeader, nd.signRequest(http.MethodGet, path, time.Now()))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for i := range 300 {
		if code := ask("pages", rangeKey(s.prefix, 1, int64(i), 1)); code == http.StatusOK {
			t.Fatalf("range %d in the pages group: %d", i, code)
		}
	}
	if code := ask("ranges", pageKey(s.prefix, 2)); code == http.StatusOK {
		t.Errorf("a page in the ranges group: %d", code)
	}
	if n := asked.Load(); n != 0 {
		t.Errorf("the cache was asked %d times for keys of the other group", n)
	}
	// The keys of each group are served.
	if ask("pages", pageKey(s.prefix, 1)) != http.StatusOK || ask("ranges", rangeKey(s.prefix, 1, 5, 10)) != http.StatusOK {
		t.Error("a page or a range in its own group was refused")
	}
	if n := asked.Load(); n != 2 {
		t.Errorf("the cache was asked %d times for a page and a range of it, want 2", n)
	}
}

// TestReadRefuses: a read outside the object's pages, or empty, is an
// error that sends nothing to a peer; a page this node owns is the
// cache's to read (peerstats.ReasonOwned); a node alone owns every page.
func TestReadRefuses(t *testing.T) {
	const block = 1 << 20
	nd, err := Start(Options{Listen: "127.0.0.1:0", Peers: []string{"http://127.0.0.1:0"}, Secret: "0123456789abcdef0123"})
	if err != nil {
		t.Fatal(err)
	}
	defer nd.Close()
	o, err := nd.Open(Info{Name: "mem://read", Identity: "mem://read v1", Size: 3*block - 100, PageSize: block})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range []struct {
		p, off int64
		n      int
	}{{-1, 0, 10}, {3, 0, 10}, {0, -1, 10}, {0, block - 5, 10}, {2, block - 150, 100}, {0, 0, 0}, {1 << 50, 0, 1}} {
		var e *Error
		if err := o.Read(ctx, c.p, c.off, make([]byte, c.n)); !errors.As(err, &e) || e.Reason != peerstats.ReasonOwnerError || e.Fill {
			t.Errorf("page %d, %d bytes at %d: %v, want an owner_error", c.p, c.n, c.off, err)
		}
	}
	if _, err := nd.Open(Info{Name: "mem://huge", Identity: "mem://huge v1", Size: 1 << 62, PageSize: 1 << 21}); err == nil || !strings.Contains(err.Error(), "more than the peer tier places") {
		t.Errorf("an object of 2^41 pages: %v", err)
	}
	var e *Error
	if err := o.Read(ctx, 2, 0, make([]byte, block-100)); !errors.As(err, &e) || e.Reason != peerstats.ReasonOwned {
		t.Errorf("a page this node owns: %v, want owned", err)
	}
	if st := o.Stats(); st.PagesOwned != 3 || st.PagesLimit != 4 || st.PeerLoads != 0 || st.PeerErrors != 0 {
		t.Errorf("a node alone: %+v, want its 3 pages, a limit of ⌈1.1·3⌉, nothing asked", st)
	}
}

// FuzzReadBounded: a peer's answer comes from the network, of any length,
// in reads of any size; readBounded returns it whole when it is within
// limit, and an error, not more, when it is longer.
func FuzzReadBounded(f *testing.F) {
	f.Add([]byte("abc"), int64(3), int64(10), uint8(1))
	f.Add(bytes.Repeat([]byte{7}, 5000), int64(100), int64(4999), uint8(7))
	f.Add([]byte{}, int64(-5), int64(0), uint8(0))
	f.Fuzz(func(t *testing.T, body []byte, expect, limit int64, chunk uint8) {
		if limit < 0 || limit > 1<<20 {
			return
		}
		got, err := readBounded(&chunked{b: body, n: int(chunk) + 1}, expect, limit)
		switch {
		case int64(len(body)) > limit:
			if err == nil {
				t.Fatalf("%d bytes read with a limit of %d", len(got), limit)
			}
		case err != nil || !bytes.Equal(got, body):
			t.Fatalf("%d bytes within a limit of %d: %d bytes, %v", len(body), limit, len(got), err)
		}
	})
}

// chunked reads b at most n bytes at a time.
type chunked struct {
	b []byte
	n int
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	k := copy(p[:min(len(p), c.n)], c.b)
	c.b = c.b[k:]
	return k, nil
}
