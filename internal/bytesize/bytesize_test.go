package bytesize

import "testing"

func TestParse(t *testing.T) {
	for in, want := range map[string]int64{
		"4096": 4096, "512MiB": 512 << 20, "8M": 8 << 20, "8m": 8 << 20, "1.5GiB": 3 << 29,
		"2 MiB": 2 << 20, "1KB": 1000, "10B": 10, "1GB": 1e9,
	} {
		if got, err := Parse(in); err != nil || got != want {
			t.Errorf("Parse(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "MiB", "-1", "1XB", "abc", "1e400"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) succeeded", bad)
		}
	}
}

func TestFormat(t *testing.T) {
	for n, want := range map[int64]string{10: "10 B", 8 << 20: "8 MiB", 3 << 29: "1.5 GiB"} {
		if got := Format(n); got != want {
			t.Errorf("Format(%d) = %q, want %q", n, got, want)
		}
	}
}
