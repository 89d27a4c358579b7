// What crosses the network between peers: signed requests, tagged values,
// the fetch of an answer within its bounds.

package peer

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// derive returns a key of the secret for one use.
func derive(secret, label string) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(label))
	return m.Sum(nil)
}

// signRequest returns the authHeader value of a request for path at t.
func (n *Node) signRequest(method, path string, t time.Time) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	m := hmac.New(sha256.New, n.reqKey)
	m.Write([]byte(method + "\n" + path + "\n" + ts))
	return ts + "." + hex.EncodeToString(m.Sum(nil))
}

// fetch sends r, signed, and reads its answer whole within ctx: at most
// the largest value of its key's object and the framing, its tag checked.
// It returns the answer's status, and for 200 the value (its bytes and
// tag).
func (nd *Node) fetch(ctx context.Context, r *http.Request) (int, []byte, error) {
	group, key, ok := strings.Cut(strings.TrimPrefix(r.URL.Path, basePath), "/")
	s, p, _, n, err := nd.parseKey(key)
	if !ok || err != nil {
		return 0, nil, fmt.Errorf("peer tier: asking for %q: %v", r.URL.Path, err)
	}
	r = r.Clone(ctx)
	r.Header.Set(authHeader, nd.signRequest(r.Method, r.URL.Path, time.Now()))
	resp, err := nd.tr.RoundTrip(r)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized {
		return 0, nil, refusal(resp)
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil, nil
	}
	const framing = 32 // GetResponse's, around the value
	if n == 0 {
		n = s.pageLen(p)
	}
	body, err := readBounded(resp.Body, n+tagLen+framing, s.info.PageSize+tagLen+framing)
	if err != nil {
		return 0, nil, fmt.Errorf("peer tier: reading the answer for %s/%s: %w", group, key, err)
	}
	value, err := responseValue(body)
	if err != nil {
		return 0, nil, fmt.Errorf("peer tier: the answer for %s/%s: %w", group, key, err)
	}
	if _, ok := nd.open(key, value); !ok {
		s.corrupt.Add(1)
		return 0, nil, fmt.Errorf("peer tier: the value for %s/%s %w", group, key, errCorruptValue)
	}
	return resp.StatusCode, value, nil
}

// readBounded reads r to its end into one buffer of about expect bytes
// (grown if need be), refusing more than limit bytes. The answer's length
// is known from its key; the server sends it chunked.
func readBounded(r io.Reader, expect, limit int64) ([]byte, error) {
	buf := make([]byte, 0, min(max(expect, 512), limit)+1)
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, min(len(buf), int(limit+1)-len(buf)))
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return nil, fmt.Errorf("longer than a page and its framing (%d bytes)", limit)
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// responseValue returns the value of groupcache's GetResponse message:
// field 1, bytes (field 2, a float64, and unknown fields are skipped).
func responseValue(b []byte) ([]byte, error) {
	var value []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
		if num == 1 && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil, protowire.ParseError(n)
			}
			value, b = v, b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
	}
	return value, nil
}

// refusedHeader says why a request was refused (401): refusedClock, its
// time more than maxSkew from the server's (the answer's Date is the
// server's); refusedSecret, its MAC wrong (another secret).
const (
	refusedHeader = "X-Ffcvfs-Refused"
	refusedClock  = "clock"
	refusedSecret = "secret"
)

// authorize refuses requests whose MAC is wrong or whose time is more than
// maxSkew from the server's, saying which (refusedHeader), and logs it once
// per asker and cause.
func (n *Node) authorize(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ts, mac, _ := strings.Cut(r.Header.Get(authHeader), ".")
		sec, err := strconv.ParseInt(ts, 10, 64)
		if err != nil || sec < -1<<40 || sec > 1<<40 {
			n.refuse(w, r, refusedSecret, "its requests are not signed as a peer's")
			return
		}
		if skew := time.Since(time.Unix(sec, 0)); skew.Abs() > maxSkew {
			n.refuse(w, r, refusedClock, fmt.Sprintf("its clock is %v off this node's (more than %v): set both by NTP", skew.Round(time.Second), maxSkew))
			return
		}
		got, err := hex.DecodeString(mac)
		want := n.signRequest(r.Method, r.URL.Path, time.Unix(sec, 0))
		wantMAC, _ := hex.DecodeString(want[strings.IndexByte(want, '.')+1:])
		if err != nil || !hmac.Equal(got, wantMAC) {
			n.refuse(w, r, refusedSecret, "its secret is not this node's (--peer-secret-file)")
			return
		}
		// At once, before the value, which may come from storage: the
		// asker waits longer for a node that works on its answer.
		w.WriteHeader(http.StatusProcessing)
		next.ServeHTTP(w, r)
	})
}

// refuse answers 401 saying why, and logs it the first time for the
// asker's host and cause.
func (n *Node) refuse(w http.ResponseWriter, r *http.Request, cause, why string) {
	w.Header().Set(refusedHeader, cause)
	http.Error(w, "not a peer", http.StatusUnauthorized)
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if n.warned.first("refused " + cause + " " + host) {
		n.opts.Logger.Warn("peer tier: refused the requests of a node: "+why+"; it reads this node's pages from storage", "from", host)
	}
}

// refusedError is an answer of 401: the owner refused this node's request.
type refusedError struct {
	cause string
	skew  time.Duration // this node's clock minus the owner's, for refusedClock
}

func (e *refusedError) Error() string {
	if e.cause == refusedClock {
		return fmt.Sprintf("refused: this node's clock is %v off the peer's (more than %v): set both by NTP", e.skew.Round(time.Second), maxSkew)
	}
	return "refused: this node's secret is not the peer's (--peer-secret-file)"
}

// refusal returns the error of resp, a 401.
func refusal(resp *http.Response) error {
	e := &refusedError{cause: refusedSecret}
	if resp.Header.Get(refusedHeader) == refusedClock {
		e.cause = refusedClock
		if t, err := http.ParseTime(resp.Header.Get("Date")); err == nil {
			e.skew = time.Since(t)
		}
	}
	return e
}

// onceSet holds the causes logged once; at most maxWarned.
type onceSet struct {
	mu   sync.Mutex
	seen map[string]bool
}

// maxWarned bounds a onceSet: past it, nothing more is logged once.
const maxWarned = 4096

// first reports whether key is logged for the first time.
func (o *onceSet) first(key string) bool {
	if o == nil {
		return true
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.seen[key] || len(o.seen) >= maxWarned {
		return false
	}
	if o.seen == nil {
		o.seen = map[string]bool{}
	}
	o.seen[key] = true
	return true
}

// sealed returns b, the value of key, with its tag appended.
func (n *Node) sealed(key string, b []byte) []byte {
	return append(b, n.tag(key, b)...)
}

// tag is a value's tag: HMAC-SHA256 over its key and its bytes, cut to
// tagLen bytes.
func (n *Node) tag(key string, b []byte) []byte {
	m := hmac.New(sha256.New, n.valueKey)
	m.Write([]byte(key))
	m.Write([]byte{0})
	m.Write(b)
	return m.Sum(nil)[:tagLen]
}

// open checks the tag of v, the value of key, and returns its bytes.
func (n *Node) open(key string, v []byte) ([]byte, bool) {
	if len(v) < tagLen {
		return nil, false
	}
	b := v[:len(v)-tagLen]
	return b, hmac.Equal(v[len(v)-tagLen:], n.tag(key, b))
}

// strip returns the bytes of a value groupcache holds: one this node made,
// or one whose tag was checked as it arrived (fetch).
func strip(v []byte) ([]byte, bool) {
	if len(v) < tagLen {
		return nil, false
	}
	return v[:len(v)-tagLen], true
}
