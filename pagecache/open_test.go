package pagecache

import (
	"context"
	"testing"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/internal/testenv"
	"github.com/ffcvfs/ffcvfs/storage"
)

// The File that OpenBeton returns keeps reading after the context of the
// open has ended (a timeout for opening is not one for the file's life).
func TestOpenBetonOutlivesItsContext(t *testing.T) {
	path := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	ctx, cancel := context.WithCancel(context.Background())
	src, f, err := OpenBeton(ctx, path, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	cancel()
	if errs := beton.Verify(f, beton.VerifyOptions{All: true}); len(errs) != 0 {
		t.Fatalf("verify after the open's context ended: %v", errs)
	}
}
