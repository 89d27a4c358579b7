// Command clustersim simulates, without any I/O, the bytes a cluster fetches
// from storage per epoch when every node keeps a page cache a little larger
// than its share of the beton: N nodes of R ranks each read an
// ImageNet-sized layout (1,281,167 samples in pages of about 76, as 8 MiB
// pages of ImageNet's JPEGs hold) in a global quasi-random order (each
// epoch's pages dealt over all ranks) or a node-affine one
// (order.Options.Nodes), and each node's cache, LRU over whole pages,
// holds (1 + margin)·P/N pages. It prints, per node count and order, the
// share of the beton the whole cluster fetched in each epoch.
//
// The pages a rank reads come from order.Pages, the same deal the real
// orders make; within a node the ranks' page sequences are interleaved
// round-robin, as ranks that step together read them. scripts/bench.sh
// cluster runs it.
//
//	go run ./tools/clustersim -nodes 8,16,32,64 -ranks 8 -epochs 3
package main

import (
	"container/list"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/order"
	"github.com/ffcvfs/ffcvfs/peer"
)

// layout is a synthetic order.Layout: pages of 60 to 92 samples (mean 76).
type layout struct {
	pages [][]uint32
	page  []int64
}

func newLayout(n int) *layout {
	rng := rand.New(rand.NewPCG(1, 2))
	l := &layout{page: make([]int64, n)}
	for i := 0; i < n; {
		k := min(60+rng.IntN(33), n-i)
		ids := make([]uint32, k)
		for j := range ids {
			ids[j] = uint32(i + j)
			l.page[i+j] = int64(len(l.pages))
		}
		l.pages = append(l.pages, ids)
		i += k
	}
	return l
}

func (l *layout) NumSamples() int              { return len(l.page) }
func (l *layout) NumPages() int                { return len(l.pages) }
func (l *layout) FirstPage() int64             { return 0 }
func (l *layout) PageSamples(p int64) []uint32 { return l.pages[p] }
func (l *layout) SamplePage(i int) int64 {
	if i < 0 || i >= len(l.page) {
		return beton.NoPage
	}
	return l.page[i]
}

// lru is a page cache of a fixed number of pages.
type lru struct {
	cap   int
	order *list.List
	at    map[int64]*list.Element
}

func newLRU(pages int) *lru {
	return &lru{cap: pages, order: list.New(), at: make(map[int64]*list.Element, pages)}
}

// read reports whether p had to be fetched.
func (c *lru) read(p int64) bool {
	if e, ok := c.at[p]; ok {
		c.order.MoveToFront(e)
		return false
	}
	c.at[p] = c.order.PushFront(p)
	if c.order.Len() > c.cap {
		old := c.order.Back()
		c.order.Remove(old)
		delete(c.at, old.Value.(int64))
	}
	return true
}

func main() {
	samples := flag.Int("samples", 1281167, "samples of the dataset (ImageNet's train set: 1,281,167)")
	nodesFlag := flag.String("nodes", "8,16,32,64", "node counts, comma-separated")
	ranks := flag.Int("ranks", 8, "ranks per node")
	epochs := flag.Int("epochs", 3, "epochs")
	margin := flag.Float64("margin", 0.1, "each node's cache holds (1 + margin)·P/N pages")
	move := flag.Float64("move", 0, "node-affine: share of a node's pages moving per epoch")
	shares := flag.String("shares", "", "instead: the peer tier's shares of a beton of these page counts (comma-separated) over -nodes, in -clusters clusters of random addresses each: bounded loads vs a plain hash ring")
	clusters := flag.Int("clusters", 200, "-shares: clusters per node and page count")
	flag.Parse()
	var nodeCounts []int
	for _, s := range strings.Split(*nodesFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 4096 {
			fmt.Fprintf(os.Stderr, "clustersim: -nodes: %q is not a node count from 1 to 4096\n", s)
			os.Exit(2)
		}
		nodeCounts = append(nodeCounts, n)
	}
	if *samples < 1 || *samples > 1<<28 || *ranks < 1 || *ranks > 64 || *epochs < 1 || *epochs > 100 || !(*margin >= 0 && *margin <= 10) {
		fmt.Fprintln(os.Stderr, "clustersim: -samples 1 to 2^28, -ranks 1 to 64, -epochs 1 to 100, -margin 0 to 10")
		os.Exit(2)
	}
	if *shares != "" {
		var pages []int64
		for _, s := range strings.Split(*shares, ",") {
			p, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
			if err != nil || p < 1 || p > 1<<24 {
				fmt.Fprintf(os.Stderr, "clustersim: -shares: %q is not a page count from 1 to 2^24\n", s)
				os.Exit(2)
			}
			pages = append(pages, p)
		}
		if *clusters < 1 || *clusters > 100000 {
			fmt.Fprintln(os.Stderr, "clustersim: -clusters 1 to 100000")
			os.Exit(2)
		}
		simulateShares(nodeCounts, pages, *clusters)
		return
	}
	l := newLayout(*samples)
	P := l.NumPages()
	fmt.Printf("simulated: %d samples in %d pages; %d ranks a node; each node's cache %.0f%% of its share (LRU, whole pages)\n",
		*samples, P, *ranks, 100*(1+*margin))
	fmt.Printf("share of the beton the cluster fetched from storage, per epoch\n")
	fmt.Printf("%-6s %-26s", "nodes", "order")
	for e := 1; e <= *epochs; e++ {
		fmt.Printf(" %9s", fmt.Sprintf("epoch %d", e))
	}
	fmt.Println()
	for _, nodes := range nodeCounts {
		for _, affine := range []bool{false, true} {
			name := "global quasi-random"
			if affine {
				name = fmt.Sprintf("node-affine (move %g)", *move)
			}
			caches := make([]*lru, nodes)
			for k := range caches {
				caches[k] = newLRU(int(float64(P) / float64(nodes) * (1 + *margin)))
			}
			fmt.Printf("%-6d %-26s", nodes, name)
			for e := range *epochs {
				fetched := 0
				for k := range nodes {
					seqs := make([][]int64, *ranks)
					for r := range *ranks {
						o := order.Options{Kind: order.QuasiRandom, Seed: 1, Epoch: uint64(e), Rank: k**ranks + r, WorldSize: nodes * *ranks}
						if affine {
							o.Nodes, o.MoveFraction = nodes, *move
						}
						pages, err := order.Pages(l, o)
						if err != nil {
							fmt.Fprintln(os.Stderr, "clustersim:", err)
							os.Exit(1)
						}
						seqs[r] = pages
					}
					for i := 0; ; i++ {
						any := false
						for _, s := range seqs {
							if i < len(s) {
								any = true
								if caches[k].read(s[i]) {
									fetched++
								}
							}
						}
						if !any {
							break
						}
					}
				}
				fmt.Printf(" %8.1f%%", 100*float64(fetched)/float64(P))
			}
			fmt.Println()
		}
	}
}

// simulateShares prints, per node count and page count, the largest share
// of the pages a node owned in each of n clusters (random addresses, a
// random object identity), as a multiple of P/N: its median and its worst
// over the clusters, and in how many of them some node's share was more
// than the sizing of the peer cache in docs/operating.md, 1.15·P/N and 2 pages; for the
// peer tier's placement (bounded loads) and for a plain hash ring.
func simulateShares(nodeCounts []int, pages []int64, n int) {
	rng := rand.New(rand.NewPCG(3, 4))
	fmt.Printf("the peer tier's shares: the largest share of a node in each of %d clusters, times P/N (median, worst),\n", n)
	fmt.Printf("and the clusters in which a node's share is more than 1.15·P/N + 2 pages (the sizing of docs/operating.md)\n")
	fmt.Printf("%-6s %-7s | %-30s | %-30s\n", "nodes", "pages", "plain ring: median  worst  over", "bounded loads: median  worst  over")
	for _, N := range nodeCounts {
		for _, P := range pages {
			var ring, bounded []float64
			overRing, overBounded := 0, 0
			sizing := 1.15*float64(P)/float64(N) + 2
			for range n {
				nodes := make([]string, N)
				for i := range nodes {
					nodes[i] = fmt.Sprintf("http://10.%d.%d.%d:7480", rng.IntN(256), rng.IntN(256), rng.IntN(256))
				}
				id := fmt.Sprintf("s3://bucket/train-%d.beton \"%x\"", rng.Uint64(), rng.Uint64())
				for _, b := range []bool{false, true} {
					counts, _ := peer.Shares(nodes, id, P, b)
					most := slices.Max(counts)
					r := float64(most) / (float64(P) / float64(N))
					if b {
						bounded = append(bounded, r)
						if float64(most) > sizing {
							overBounded++
						}
					} else {
						ring = append(ring, r)
						if float64(most) > sizing {
							overRing++
						}
					}
				}
			}
			slices.Sort(ring)
			slices.Sort(bounded)
			fmt.Printf("%-6d %-7d | %13.3f %6.3f %5d | %16.3f %6.3f %5d\n", N, P,
				ring[len(ring)/2], ring[len(ring)-1], overRing, bounded[len(bounded)/2], bounded[len(bounded)-1], overBounded)
		}
	}
}
