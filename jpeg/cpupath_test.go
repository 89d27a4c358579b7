package jpeg

import (
	"runtime"
	"testing"

	"golang.org/x/sys/cpu"
)

// TestCPUPath: the decoder reports the x86-64-v3 path where the CPU has
// that level's flags (AVX2, BMI2, FMA...), the portable one elsewhere.
func TestCPUPath(t *testing.T) {
	want := "portable"
	x := cpu.X86
	if runtime.GOARCH == "amd64" && x.HasAVX2 && x.HasBMI1 && x.HasBMI2 && x.HasFMA && x.HasPOPCNT {
		want = "x86-64-v3"
	}
	if got := CPUPath(); got != want {
		t.Errorf("CPUPath() = %q, want %q", got, want)
	}
}
