// Command peerburst asks a node of the peer tier for many distinct pages
// at once, as a member holding the secret may: the load a node's serving
// must bear within its memory. It joins the tier as a member, asks the
// node given for -pages of the pages it owns, all at once, and prints how
// many it served and how many failed, with the first error.
//
//	peerburst -listen 127.77.0.9:7070 -peers http://127.77.0.1:7070,http://127.77.0.9:7070 \
//	    -node http://127.77.0.1:7070 -secret-file secret -pages 100 BETON
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/ffcvfs/ffcvfs/pagecache"
	"github.com/ffcvfs/ffcvfs/peer"
	"github.com/ffcvfs/ffcvfs/storage"
)

func main() {
	listen := flag.String("listen", "", "HOST:PORT this member listens on")
	peers := flag.String("peers", "", "every member's URL, comma-separated, this one's included")
	node := flag.String("node", "", "URL of the node to ask")
	secretFile := flag.String("secret-file", "", "the tier's secret")
	pages := flag.Int("pages", 100, "distinct pages the node owns to ask for at once (1 to 100000)")
	rounds := flag.Int("rounds", 1, "times to ask for them (1 to 1000)")
	flag.Parse()
	if flag.NArg() != 1 || *listen == "" || *node == "" || *secretFile == "" || *pages < 1 || *pages > 100000 || *rounds < 1 || *rounds > 1000 {
		fmt.Fprintln(os.Stderr, "usage: peerburst -listen HOST:PORT -peers URLS -node URL -secret-file FILE [-pages N] [-rounds N] BETON")
		os.Exit(2)
	}
	if err := run(flag.Arg(0), *listen, *peers, *node, *secretFile, *pages, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "peerburst:", err)
		os.Exit(1)
	}
}

func run(location, listen, peers, node, secretFile string, pages, rounds int) error {
	secret, err := os.ReadFile(secretFile)
	if err != nil {
		return err
	}
	ctx := context.Background()
	src, f, err := pagecache.OpenBeton(ctx, location, storage.Options{})
	if err != nil {
		return err
	}
	defer src.Close()
	info := peer.Info{Name: src.Name(), Identity: storage.IdentityOf(src), Size: f.Size(), PageSize: f.PageSize()}
	nd, err := peer.Start(peer.Options{Listen: listen, Peers: peer.SplitPeers(peers),
		Secret: strings.TrimSpace(string(secret)), Timeout: peer.DefaultTimeout})
	if err != nil {
		return err
	}
	defer nd.Close()
	obj, err := nd.Open(info)
	if err != nil {
		return err
	}
	var asked []int64
	first, n := f.FirstPage(), f.FirstPage()+int64(f.NumPages())
	for p := first; p < n && len(asked) < pages; p++ {
		if obj.Owner(p) == node && (p+1)*f.PageSize() <= f.Size() {
			asked = append(asked, p)
		}
	}
	if len(asked) < pages {
		return fmt.Errorf("%s owns %d whole data pages of %s, fewer than -pages %d", node, len(asked), location, pages)
	}
	var (
		mu       sync.Mutex
		served   int
		failed   int
		firstErr error
	)
	start := time.Now()
	for range rounds {
		var wg sync.WaitGroup
		for _, p := range asked {
			wg.Add(1)
			go func() {
				defer wg.Done()
				b := make([]byte, f.PageSize())
				err := obj.Read(ctx, p, 0, b)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed++
					if firstErr == nil {
						firstErr = err
					}
					return
				}
				served++
			}()
		}
		wg.Wait()
	}
	fmt.Printf("asked %d pages %d times of %s: %d served, %d failed in %v\n", len(asked), rounds, node, served, failed, time.Since(start).Round(time.Millisecond))
	if firstErr != nil {
		fmt.Printf("first error: %v\n", firstErr)
	}
	return nil
}
