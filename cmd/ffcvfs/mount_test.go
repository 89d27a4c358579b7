package main

import (
	"testing"

	"github.com/ffcvfs/ffcvfs/storage"
)

// TestMountProcs: one P for a file whatever the cores; for network storage
// one per 8 cores, from 1 to 8.
func TestMountProcs(t *testing.T) {
	for _, tc := range []struct {
		src  string
		cpus int
		want int
	}{
		{"/data/train.beton", 64, 1},
		{"file:///data/train.beton", 2, 1},
		{"s3://bucket/train.beton", 2, 1},
		{"s3://bucket/train.beton", 15, 1},
		{"S3://bucket/train.beton", 16, 2},
		{"https://host/train.beton", 64, 8},
		{"http://host/train.beton", 256, 8},
	} {
		if got := mountProcs(storage.IsNetwork(tc.src), tc.cpus); got != tc.want {
			t.Errorf("%s on %d cores: GOMAXPROCS %d, want %d", tc.src, tc.cpus, got, tc.want)
		}
	}
}
