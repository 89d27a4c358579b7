package toxitest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

// Module is what scripts/lib.sh installs toxiproxy-server from.
const Module = "github.com/Shopify/toxiproxy/v2/cmd/server@v2.5.0"

// Server is a running toxiproxy-server.
type Server struct {
	// Immutable after Start.
	bin    string
	addr   string // of the API, 127.0.0.1:port
	client *http.Client

	mu sync.Mutex
	// Guarded by mu.
	proc *testenv.Daemon // the last one started
}

// Start starts toxiproxy-server with its API on a free port of 127.0.0.1
// and waits until it answers. t.Cleanup stops it.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := testenv.FindGoTool("toxiproxy-server", "FFCVFS_TOXIPROXY")
	if bin == "" {
		testenv.Missing(t, "toxiproxy-server not found ($FFCVFS_TOXIPROXY, PATH, $(go env GOPATH)/bin, ~/go/bin, /root/go/bin); install it with ensure_toxiproxy of scripts/lib.sh, or: go install %s",
			Module)
		return nil
	}
	s := &Server{bin: bin, client: &http.Client{Timeout: 10 * time.Second}}
	var err error
	for try := 0; try < 5; try++ {
		if s.addr, err = testenv.FreeAddr(); err != nil {
			t.Fatalf("toxitest: no free port: %v", err)
		}
		if err = s.start(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("toxitest: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// URL returns the address of the API, http://127.0.0.1:port.
func (s *Server) URL() string { return "http://" + s.addr }

// Output returns what toxiproxy-server printed so far, for failure
// messages.
func (s *Server) Output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return ""
	}
	return s.proc.Output()
}

// Stop stops the server (SIGTERM, then SIGKILL after 5 s); its proxies go
// with it. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.proc.Stop()
	}
}

// start runs toxiproxy-server on s.addr and waits until its API answers.
func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	host, port, err := net.SplitHostPort(s.addr)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.bin, "-host", host, "-port", port)
	cmd.Env = append(os.Environ(), "LOG_LEVEL=warn")
	probe := &http.Client{Timeout: time.Second}
	proc, err := testenv.StartDaemon("toxiproxy-server on "+s.addr, cmd, func() error {
		resp, err := probe.Get(s.URL() + "/version")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /version: %s", resp.Status)
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.proc = proc
	return nil
}

// apiError is a refusal of toxiproxy's API.
type apiError struct {
	method, path string
	status       string
	msg          string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%s %s: %s: %s", e.method, e.path, e.status, e.msg)
}

// do sends in (if not nil) as JSON to the API and decodes the answer into
// out (if not nil).
func (s *Server) do(method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.URL()+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var ae struct {
			Error string `json:"error"`
		}
		msg := strings.TrimSpace(string(b))
		if json.Unmarshal(b, &ae) == nil && ae.Error != "" {
			msg = ae.Error
		}
		return &apiError{method, path, resp.Status, msg}
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: %w: %s", method, path, err, b)
		}
	}
	return nil
}

// proxyState is a proxy as the API shows it.
type proxyState struct {
	Name     string  `json:"name"`
	Listen   string  `json:"listen"`
	Upstream string  `json:"upstream"`
	Enabled  bool    `json:"enabled"`
	Toxics   []Toxic `json:"toxics,omitempty"`
}

// Proxy is a proxy of a Server: it listens on Addr and forwards each
// connection to its upstream, through its toxics.
type Proxy struct {
	// Immutable after Server.Proxy.
	s    *Server
	name string
	addr string
}

// Proxy creates a proxy named name, enabled, that listens on a free port of
// 127.0.0.1 and forwards to upstream (host:port). t.Cleanup deletes it.
func (s *Server) Proxy(t testing.TB, name, upstream string) *Proxy {
	t.Helper()
	var st proxyState
	in := proxyState{Name: name, Listen: "127.0.0.1:0", Upstream: upstream, Enabled: true}
	if err := s.do(http.MethodPost, "/proxies", in, &st); err != nil {
		t.Fatalf("toxitest: create proxy %s to %s: %v", name, upstream, err)
	}
	if _, port, err := net.SplitHostPort(st.Listen); err != nil || port == "0" {
		t.Fatalf("toxitest: proxy %s listens on %q, not on a port of its own", name, st.Listen)
	}
	p := &Proxy{s: s, name: name, addr: st.Listen}
	t.Cleanup(func() {
		// Gone already when the server was stopped first.
		_ = s.do(http.MethodDelete, "/proxies/"+url.PathEscape(name), nil, nil)
	})
	return p
}

// Name returns the proxy's name.
func (p *Proxy) Name() string { return p.name }

// Addr returns the address the proxy listens on, 127.0.0.1:port. It stays
// the same across Disable and Enable.
func (p *Proxy) Addr() string { return p.addr }

func (p *Proxy) path() string { return "/proxies/" + url.PathEscape(p.name) }

// Toxic is a toxic of a proxy; see the package documentation for the types
// and their attributes.
type Toxic struct {
	// Name names the toxic among those of its proxy (default: type_stream).
	Name string `json:"name,omitempty"`
	Type string `json:"type"`
	// Stream is "downstream" (server to client; the default) or
	// "upstream".
	Stream string `json:"stream,omitempty"`
	// Toxicity is the share of connections the toxic acts on, from 0 to 1;
	// 0 stands for 1, every connection.
	Toxicity float32 `json:"toxicity"`
	// Attributes are the type's settings, by name.
	Attributes map[string]int64 `json:"attributes,omitempty"`
}

// AddToxic adds a toxic to the proxy. It acts on the connections open now
// and on new ones, until RemoveToxic.
func (p *Proxy) AddToxic(t testing.TB, x Toxic) {
	t.Helper()
	if x.Toxicity == 0 {
		x.Toxicity = 1
	}
	if err := p.s.do(http.MethodPost, p.path()+"/toxics", x, nil); err != nil {
		t.Fatalf("toxitest: add %s toxic %q to proxy %s: %v", x.Type, x.Name, p.name, err)
	}
}

// RemoveToxic removes the named toxic.
func (p *Proxy) RemoveToxic(t testing.TB, name string) {
	t.Helper()
	if err := p.s.do(http.MethodDelete, p.path()+"/toxics/"+url.PathEscape(name), nil, nil); err != nil {
		t.Fatalf("toxitest: remove toxic %q of proxy %s: %v", name, p.name, err)
	}
}

// Toxics returns the proxy's toxics.
func (p *Proxy) Toxics(t testing.TB) []Toxic {
	t.Helper()
	var list []Toxic
	if err := p.s.do(http.MethodGet, p.path()+"/toxics", nil, &list); err != nil {
		t.Fatalf("toxitest: list the toxics of proxy %s: %v", p.name, err)
	}
	return list
}

// Disable closes the proxy's connections and stops it listening, so that
// connecting is refused, as if the server were down.
func (p *Proxy) Disable(t testing.TB) {
	t.Helper()
	p.setEnabled(t, false)
}

// Enable makes a disabled proxy listen again, on the same address.
func (p *Proxy) Enable(t testing.TB) {
	t.Helper()
	p.setEnabled(t, true)
}

func (p *Proxy) setEnabled(t testing.TB, on bool) {
	t.Helper()
	var st proxyState
	if err := p.s.do(http.MethodPost, p.path(), map[string]bool{"enabled": on}, &st); err != nil {
		t.Fatalf("toxitest: set proxy %s enabled=%v: %v", p.name, on, err)
	}
	if st.Enabled != on || st.Listen != p.addr {
		t.Fatalf("toxitest: proxy %s is enabled=%v on %s after asking for enabled=%v on %s", p.name, st.Enabled, st.Listen, on, p.addr)
	}
}
