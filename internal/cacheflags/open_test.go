package cacheflags

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/ffcvfs/ffcvfs/internal/testenv"
	"github.com/ffcvfs/ffcvfs/pagecache"
)

// open runs Open as a command whose flags are args would.
func open(t *testing.T, location string, args ...string) (*Opened, error) {
	t.Helper()
	var o *Opened
	var err error
	app := &cli.App{
		Flags: append(append(append([]cli.Flag{
			&cli.StringFlag{Name: "cache-size", Value: "64MiB"},
			&cli.IntFlag{Name: "readers"},
		}, Flags("cache")...), PeerFlags("peers")...), SourceFlags("storage")...),
		Action: func(c *cli.Context) error {
			o, err = Open(c, location, pagecache.Options{})
			return nil
		},
	}
	if rerr := app.RunContext(context.Background(), append([]string{"test"}, args...)); rerr != nil {
		t.Fatal(rerr)
	}
	return o, err
}

// Both commands open a beton here: flags that are wrong exit 2, a beton
// that cannot be read exits 1, each with a sentence naming the flag or the
// file.
func TestOpenErrors(t *testing.T) {
	beton := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	photo := filepath.Join(t.TempDir(), "photo.jpg")
	if err := os.WriteFile(photo, testenv.Photos(t, 1)[0].Data, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		location string
		args     []string
		code     int
		msg      string
	}{
		{beton, []string{"--cache-size", "lots"}, 2, "--cache-size"},
		{beton, []string{"--disk-cache-size", "1GiB"}, 2, "--disk-cache-size needs --disk-cache"},
		{beton, []string{"--disk-cache", t.TempDir(), "--disk-cache-size", "-5"}, 2, "--disk-cache-size: want a positive size"},
		{beton, []string{"--peers", "http://10.0.0.1:7480"}, 2, "--peers needs --peer-listen"},
		{beton, []string{"--peer-listen", "127.0.0.1:0", "--peer-cache-size", "0"}, 2, "--peer-cache-size"},
		{filepath.Join(t.TempDir(), "missing.beton"), nil, 1, "missing.beton"},
		{photo, nil, 1, "photo.jpg"},
	} {
		o, err := open(t, c.location, c.args...)
		if err == nil {
			o.Close()
			t.Errorf("%s %v: opened", c.location, c.args)
			continue
		}
		var ec cli.ExitCoder
		if !errors.As(err, &ec) || ec.ExitCode() != c.code || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s %v: %v (exit %v), want exit %d and %q", filepath.Base(c.location), c.args, err, ec, c.code, c.msg)
		}
	}
}

func TestOpen(t *testing.T) {
	path := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	o, err := open(t, path, "--cache-size", "16MiB")
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if o.Peers != nil || o.File.NumSamples() == 0 || o.Cache.Stats().BudgetBytes > 16<<20 {
		t.Fatalf("opened %s: peers %v, %d samples, budget %d", path, o.Peers != nil, o.File.NumSamples(), o.Cache.Stats().BudgetBytes)
	}
}
