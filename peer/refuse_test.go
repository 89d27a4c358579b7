package peer

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestAuthorizeSaysWhy: a request signed with another secret, or at a time
// more than maxSkew from the server's, is refused saying which, on both
// sides (the answer's header, and the asker's error from it), and the
// server logs each cause once per asker. Both were a bare 401, and nothing
// was said: nodes with different secrets or clocks shared nothing.
func TestAuthorizeSaysWhy(t *testing.T) {
	var logs bytes.Buffer
	nd := &Node{opts: Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))}, reqKey: derive("the server's secret", "ffcvfs peer request")}
	h := nd.authorize(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	ask := func(key []byte, at time.Time) *http.Response {
		r := httptest.NewRequest(http.MethodGet, basePath+"pages/t/0", nil)
		r.RemoteAddr = "127.77.0.9:1234"
		asker := &Node{reqKey: key}
		r.Header.Set(authHeader, asker.signRequest(r.Method, r.URL.Path, at))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Result()
	}
	other := derive("another secret", "ffcvfs peer request")
	for range 3 {
		resp := ask(other, time.Now())
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get(refusedHeader) != refusedSecret {
			t.Fatalf("another secret: %d %q", resp.StatusCode, resp.Header.Get(refusedHeader))
		}
		if err := refusal(resp); !strings.Contains(err.Error(), "secret is not the peer's") {
			t.Errorf("the asker's error: %v", err)
		}
		resp = ask(nd.reqKey, time.Now().Add(-7*time.Minute))
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get(refusedHeader) != refusedClock {
			t.Fatalf("a clock 7 minutes off: %d %q", resp.StatusCode, resp.Header.Get(refusedHeader))
		}
		resp.Header.Set("Date", time.Now().Add(7*time.Minute).UTC().Format(http.TimeFormat))
		if err := refusal(resp); !strings.Contains(err.Error(), "clock is -") || !strings.Contains(err.Error(), "NTP") {
			t.Errorf("the asker's error: %v", err)
		}
	}
	if resp := ask(nd.reqKey, time.Now()); resp.StatusCode == http.StatusUnauthorized {
		t.Error("a right request refused")
	}
	out := logs.String()
	if strings.Count(out, "its secret is not this node's") != 1 || strings.Count(out, "its clock is 7m") != 1 || !strings.Contains(out, "from=127.77.0.9") {
		t.Errorf("the server's log, three times each refused:\n%s\nwant each cause once, naming the asker", out)
	}
}

// TestRedact: a peer's URL with credentials is never echoed with them.
func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"http://user:hunter2@10.0.0.1:7070": "http://***@10.0.0.1:7070",
		"http://10.0.0.1:7070":              "http://10.0.0.1:7070",
		"user:hunter2@10.0.0.1:7070":        "***@10.0.0.1:7070",
		"http://a@b@c:1":                    "http://***@c:1",
	} {
		if got := redact(in); got != want {
			t.Errorf("redact(%q) = %q, want %q", in, got, want)
		}
	}
	_, err := normalizePeers([]string{"http://user:hunter2@10.0.0.1:7070"}, "http")
	if err == nil || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "credentials") {
		t.Errorf("a peer with credentials: %v", err)
	}
}

// TestSameNode: this node listed under another name (localhost for
// 127.0.0.1) is one member, not two that ask each other over HTTP.
func TestSameNode(t *testing.T) {
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{"http://localhost:7070", "http://127.0.0.1:7070", true},
		{"http://localhost:7070", "http://[::1]:7070", true},
		{"http://127.0.0.1:7070", "http://127.0.0.1:7070", true},
		{"http://localhost:7070", "http://127.77.0.1:7070", false},
		{"http://127.0.0.1:7070", "http://127.0.0.1:7071", false},
		{"http://node1:7070", "http://127.0.0.1:7070", false},
		{"https://127.0.0.1:7070", "http://127.0.0.1:7070", false},
	} {
		if got := sameNode(c.a, c.b); got != c.same {
			t.Errorf("sameNode(%s, %s) = %v", c.a, c.b, got)
		}
	}
	m := &members{self: "http://127.0.0.1:7070", logger: slog.New(slog.DiscardHandler)}
	got := m.withSelf([]string{"http://127.0.0.1:7070", "http://127.0.0.2:7070", "http://localhost:7070"})
	if strings.Join(got, ",") != "http://127.0.0.1:7070,http://127.0.0.2:7070" {
		t.Errorf("members %v; want this node once", got)
	}
}

// TestFailedPeersQuiet: failed peers are warned of at most failedWarnings
// times a minute, the next warning counting those left out; a peer that
// fails again is left alone twice as long, up to maxDownHold. 4,093 dead
// members gave 182 warnings in 3 s and were tried every 10 s each.
func TestFailedPeersQuiet(t *testing.T) {
	var w warnLimit
	now := time.Now()
	allowed := 0
	for range 100 {
		if _, ok := w.allow(now); ok {
			allowed++
		}
	}
	if allowed != failedWarnings {
		t.Errorf("%d warnings of 100 in a moment, want %d", allowed, failedWarnings)
	}
	if dropped, ok := w.allow(now.Add(61 * time.Second)); !ok || dropped != 100-failedWarnings {
		t.Errorf("a minute later: %v, %d said left out; want %d", ok, dropped, 100-failedWarnings)
	}
	base := "http://127.77.9.9:1"
	nd := &Node{}
	var holds []time.Duration
	for range 9 {
		holds = append(holds, nd.holdDown(base))
	}
	if holds[0] != downHold || holds[1] != 2*downHold || holds[8] != maxDownHold {
		t.Errorf("holds %v: want %v doubling to %v", holds, downHold, maxDownHold)
	}
}
