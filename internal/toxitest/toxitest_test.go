package toxitest

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"
)

// get fetches url on a fresh connection and returns the body.
func get(url string) (string, error) {
	c := &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{DisableKeepAlives: true},
	}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func TestProxyToxicsAndOutage(t *testing.T) {
	const body = "hello through the proxy"
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, body)
	}))
	defer up.Close()

	tp := Start(t)
	p := tp.Proxy(t, "web", strings.TrimPrefix(up.URL, "http://"))
	if p.Name() != "web" || !strings.HasPrefix(p.Addr(), "127.0.0.1:") {
		t.Fatalf("proxy %q on %q", p.Name(), p.Addr())
	}
	url := "http://" + p.Addr() + "/"
	if got, err := get(url); err != nil || got != body {
		t.Fatalf("through the proxy: %q, %v", got, err)
	}

	p.AddToxic(t, Toxic{Name: "cut", Type: "reset_peer"})
	if got := p.Toxics(t); len(got) != 1 || got[0].Name != "cut" || got[0].Type != "reset_peer" || got[0].Stream != "downstream" || got[0].Toxicity != 1 {
		t.Errorf("toxics %+v, want the one reset_peer downstream", got)
	}
	if got, err := get(url); err == nil {
		t.Errorf("with reset_peer: %q, want an error", got)
	}
	p.RemoveToxic(t, "cut")
	if got := p.Toxics(t); len(got) != 0 {
		t.Errorf("toxics %+v after removing the only one", got)
	}
	if got, err := get(url); err != nil || got != body {
		t.Errorf("after removing the toxic: %q, %v", got, err)
	}

	p.Disable(t)
	if _, err := get(url); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("disabled: %v, want connection refused", err)
	}
	p.Enable(t)
	if got, err := get(url); err != nil || got != body {
		t.Errorf("enabled again: %q, %v", got, err)
	}
}

func TestAPIRefusalsAreErrors(t *testing.T) {
	tp := Start(t)
	p := tp.Proxy(t, "p", "127.0.0.1:1")
	err := tp.do(http.MethodPost, p.path()+"/toxics", Toxic{Type: "no_such_toxic", Toxicity: 1}, nil)
	var ae *apiError
	if !errors.As(err, &ae) || !strings.Contains(err.Error(), "invalid toxic type") || !strings.Contains(err.Error(), "400") {
		t.Errorf("an unknown toxic type: %v", err)
	}
	err = tp.do(http.MethodDelete, p.path()+"/toxics/missing", nil, nil)
	if !errors.As(err, &ae) || !strings.Contains(err.Error(), "404") {
		t.Errorf("removing a missing toxic: %v", err)
	}
	tp.Stop()
	if err := tp.do(http.MethodGet, "/version", nil, nil); err == nil {
		t.Error("the API answers after Stop")
	}
	tp.Stop() // twice is fine
}
