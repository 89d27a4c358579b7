package resize

import (
	"runtime"
	"testing"

	"golang.org/x/sys/cpu"
)

// TestCPUPath: the path the resizer reports is the one this CPU's flags
// call for (AVX-512 F and BW, AVX2, or neither; on other architectures,
// the portable one).
func TestCPUPath(t *testing.T) {
	want := "portable"
	if runtime.GOARCH == "amd64" {
		switch {
		case cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX2:
			want = "AVX-512"
		case cpu.X86.HasAVX2:
			want = "AVX2"
		}
	}
	if got := CPUPath(); got != want {
		t.Errorf("CPUPath() = %q, want %q", got, want)
	}
}
