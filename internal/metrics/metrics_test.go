package metrics

import "testing"

func TestListenAddr(t *testing.T) {
	for in, want := range map[string]string{
		"9100": "127.0.0.1:9100", ":9100": "127.0.0.1:9100", "0.0.0.0:9100": "0.0.0.0:9100",
		"[::1]:9100": "[::1]:9100", "localhost:0": "localhost:0",
	} {
		if got, err := ListenAddr(in); err != nil || got != want {
			t.Errorf("ListenAddr(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "host", "host:http", ":99999", "a:b:c"} {
		if got, err := ListenAddr(in); err == nil {
			t.Errorf("ListenAddr(%q) = %q, want an error", in, got)
		}
	}
}
