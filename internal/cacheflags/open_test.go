package cacheflags

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ffcvfs/ffcvfs/internal/peerstats"
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
		{beton, []string{"--peer-listen", "127.0.0.1:0", "--peer-cache-size", "0"}, 2, "--peer-cache-size 0 keeps the pages this node owns in the cache's tiers alone, and there are none"},
		{beton, []string{"--peer-listen", "127.0.0.1:0", "--peer-cache-size", "-5", "--disk-cache", t.TempDir()}, 2, "--peer-cache-size: want a size"},
		{beton, []string{"--peer-listen", "127.0.0.1:0", "--peer-cache-size", "lots"}, 2, "--peer-cache-size: want a size"},
		{beton, []string{"--peer-listen", "127.0.0.1:0", "--peer-cache-size", "99999999999PiB"}, 2, "--peer-cache-size: want a size"},
		{beton, []string{"--peer-listen", "127.0.0.1:0", "--peer-timeout", "0s"}, 2, "--peer-timeout 0s: want more than 0"},
		{beton, []string{"--peer-listen", "127.0.0.1:0", "--peer-timeout", "-1s"}, 2, "--peer-timeout -1s: want more than 0"},
		{beton, []string{"--peer-listen", "127.0.0.1:0", "--peer-timeout", "2000000h"}, 2, "at most 10m0s"},
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

// TestPeerTLSFlags: the TLS flags of the peer tier come all three or not
// at all, their files are read with care (bounded, the key the owner's
// alone), and the peers' URLs say https:// with them, http:// without;
// each mistake exits 2 with a sentence naming it.
func TestPeerTLSFlags(t *testing.T) {
	beton := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	t.Setenv("FFCVFS_PEER_SECRET", "0123456789abcdef0123")
	ca := testenv.NewCA(t, "peers")
	cert, key := ca.Issue(t, "node", "127.0.0.1")
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	openKey := filepath.Join(dir, "open-key.pem")
	b, _ := os.ReadFile(key)
	if err := os.WriteFile(garbage, []byte("not PEM\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(openKey, b, 0o644); err != nil {
		t.Fatal(err)
	}
	peers := func(scheme string) []string {
		return []string{"--peer-listen", "127.0.0.1:7", "--peers", scheme + "://127.0.0.1:7"}
	}
	tlsArgs := func(c, k, a string) []string {
		return []string{"--peer-tls-cert", c, "--peer-tls-key", k, "--peer-tls-ca", a}
	}
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--peer-tls-cert", cert}, "--peer-tls-cert needs --peer-listen"},
		{append(peers("https"), "--peer-tls-cert", cert), "--peer-tls-key and --peer-tls-ca missing"},
		{append(peers("https"), "--peer-tls-cert", cert, "--peer-tls-key", key), "--peer-tls-ca missing"},
		{append(peers("https"), tlsArgs(cert, openKey, ca.File)...), "readable by others"},
		{append(peers("https"), tlsArgs(garbage, key, ca.File)...), "--peer-tls-cert " + garbage},
		{append(peers("https"), tlsArgs(cert, key, garbage)...), "--peer-tls-ca " + garbage + ": no PEM certificate"},
		{append(peers("https"), tlsArgs(filepath.Join(dir, "missing.pem"), key, ca.File)...), "--peer-tls-cert: "},
		{append(peers("https"), tlsArgs(cert, key, "/dev/zero")...), "--peer-tls-ca: "},
		{append(peers("https"), tlsArgs(cert, key, dir)...), "--peer-tls-ca: "},
		{append(peers("http"), tlsArgs(cert, key, ca.File)...), "every peer is https://"},
		{peers("https"), "https:// needs --peer-tls-cert"},
	} {
		o, err := open(t, beton, c.args...)
		if err == nil {
			o.Close()
			t.Errorf("%v: opened", c.args)
			continue
		}
		var ec cli.ExitCoder
		if !errors.As(err, &ec) || ec.ExitCode() != 2 || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%v: %v (exit %v), want exit 2 and %q", c.args, err, ec, c.msg)
		}
	}
}

// TestPeerCacheSize: the peer tier's memory is 1GiB by default, none with
// a disk tier (which keeps the pages the node owns), and 0 only with a
// tier to keep them in.
func TestPeerCacheSize(t *testing.T) {
	t.Setenv("FFCVFS_PEER_SECRET", "0123456789abcdef0123")
	disk := t.TempDir()
	for _, c := range []struct {
		args []string
		want int64
	}{
		{nil, 1 << 30},
		{[]string{"--disk-cache", disk}, 0},
		{[]string{"--disk-cache", disk, "--peer-cache-size", "64MiB"}, 64 << 20},
		{[]string{"--compress-ram", "--peer-cache-size", "0"}, 0},
		{[]string{"--compress-ram"}, 1 << 30},
	} {
		var keep int64
		var ok bool
		var err error
		app := &cli.App{
			Flags: append(Flags("cache"), PeerFlags("peers")...),
			Action: func(c *cli.Context) error {
				_, keep, ok, err = PeerOptions(c)
				return nil
			},
		}
		args := append([]string{"test", "--peer-listen", "127.0.0.1:7", "--peers", "http://127.0.0.1:7"}, c.args...)
		if rerr := app.RunContext(context.Background(), args); rerr != nil {
			t.Fatal(rerr)
		}
		if err != nil || !ok || keep != c.want {
			t.Errorf("%v: peer cache of %d bytes (ok %v, %v), want %d", c.args, keep, ok, err, c.want)
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
	if o.Cache.Stats().Peers != nil || o.File.NumSamples() == 0 || o.Cache.Stats().BudgetBytes > 16<<20 {
		t.Fatalf("opened %s: peers %v, %d samples, budget %d", path, o.Cache.Stats().Peers != nil, o.File.NumSamples(), o.Cache.Stats().BudgetBytes)
	}
}

// TestPeerOwnCert: a node's own certificate that its peers would refuse
// (expired, not valid yet, naming another address, signed by another CA)
// is refused at start with a sentence naming the file and why (exit 2);
// such a node started silently and every peer refused it.
func TestPeerOwnCert(t *testing.T) {
	beton := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	t.Setenv("FFCVFS_PEER_SECRET", "0123456789abcdef0123")
	ca, other := testenv.NewCA(t, "peers"), testenv.NewCA(t, "others")
	now := time.Now()
	expired, expiredKey := ca.IssueValid(t, "expired", now.Add(-48*time.Hour), now.Add(-time.Hour), "127.0.0.1")
	future, futureKey := ca.IssueValid(t, "future", now.Add(time.Hour), now.Add(48*time.Hour), "127.0.0.1")
	elsewhere, elsewhereKey := ca.Issue(t, "elsewhere", "10.1.2.3")
	foreign, foreignKey := other.Issue(t, "foreign", "127.0.0.1")
	for _, c := range []struct {
		cert, key, msg string
	}{
		{expired, expiredKey, "--peer-tls-cert " + expired + " expired on "},
		{future, futureKey, "is valid from "},
		{elsewhere, elsewhereKey, "--peer-tls-cert " + elsewhere + " names 10.1.2.3, not 127.0.0.1, this node's address"},
		{foreign, foreignKey, "does not hold for --peer-tls-ca"},
	} {
		o, err := open(t, beton, "--peer-listen", "127.0.0.1:7", "--peers", "https://127.0.0.1:7",
			"--peer-tls-cert", c.cert, "--peer-tls-key", c.key, "--peer-tls-ca", ca.File)
		if err == nil {
			o.Close()
			t.Errorf("%s: opened", filepath.Base(c.cert))
			continue
		}
		var ec cli.ExitCoder
		if !errors.As(err, &ec) || ec.ExitCode() != 2 || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: %v (exit %v), want exit 2 and %q", filepath.Base(c.cert), err, ec, c.msg)
		}
	}
}

// TestPeersFileMessages: a peers file holding dns:NAME:PORT, 4 KB of
// binary or a 4,000-byte word is refused in one short line: the first was taken for a DNS
// name whose port held the line break, and the second echoed whole.
func TestPeersFileMessages(t *testing.T) {
	beton := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	t.Setenv("FFCVFS_PEER_SECRET", "0123456789abcdef0123")
	dir := t.TempDir()
	binary := make([]byte, 4096)
	for i := range binary {
		binary[i] = byte(0x80 + (i*7+i/3)%128) // no separator: one token
	}
	for name, c := range map[string]struct {
		data []byte
		msg  string
	}{
		"dns":    {[]byte("dns:peers.local:7480\n"), `peer "dns:peers.local:7480": want http://HOST:PORT (dns:NAME:PORT is given to --peers itself, not listed in a file)`},
		"binary": {binary, "peer (4096 bytes, not text): want http://HOST:PORT"},
		"long":   {[]byte(strings.Repeat("h", 4000)), `"… (4000 bytes): want http://HOST:PORT`},
	} {
		file := filepath.Join(dir, name)
		if err := os.WriteFile(file, c.data, 0o600); err != nil {
			t.Fatal(err)
		}
		o, err := open(t, beton, "--peer-listen", "127.0.0.1:7", "--peers", "@"+file)
		if err == nil {
			o.Close()
			t.Errorf("%s: opened", name)
			continue
		}
		var ec cli.ExitCoder
		if msg := err.Error(); !errors.As(err, &ec) || ec.ExitCode() != 2 || !strings.Contains(msg, c.msg) || strings.ContainsAny(msg, "\n\r") || len(msg) > 300 {
			t.Errorf("%s: %q (exit %v), want exit 2 and one short line with %q", name, msg, ec, c.msg)
		}
	}
}

// TestPeerReasonsAgree: the cache counts its storage reads by every reason
// the peer tier's errors name, each present from the start.
func TestPeerReasonsAgree(t *testing.T) {
	t.Setenv("FFCVFS_PEER_SECRET", "0123456789abcdef0123")
	o, err := open(t, testenv.Fixture(t, "beton", "imagefolder-jpg.beton"), "--peer-listen", "127.0.0.1:0", "--peers", "http://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	st := o.Cache.Stats().Peers
	if st == nil {
		t.Fatal("no peer tier")
	}
	for _, why := range []string{peerstats.ReasonOwned, peerstats.ReasonOwnerTimeout, peerstats.ReasonOwnerGone, peerstats.ReasonOwnerError, peerstats.ReasonCorrupt} {
		if _, ok := st.StorageReasons[why]; !ok {
			t.Errorf("the cache's storage reasons %v lack the peer tier's %q", st.StorageReasons, why)
		}
	}
	if len(st.StorageReasons) != 5 {
		t.Errorf("the cache's storage reasons %v: more than the peer tier's 5", st.StorageReasons)
	}
}
