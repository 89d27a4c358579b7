package peer_test

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"net"

	"github.com/ffcvfs/ffcvfs/peer"
)

// Two nodes in one process share an object's pages: each owns some, reads
// the others from their owner, and answers for its own through the
// function its cache gives it (here, the pages' bytes in memory).
func Example() {
	const pageSize, pages = 1 << 16, 8
	object := bytes.Repeat([]byte("ffcvfs"), pageSize*pages/6+1)[:pageSize*pages]
	info := peer.Info{Name: "mem://example", Identity: "mem://example v1", Size: int64(len(object)), PageSize: pageSize}

	addrs := []string{freeAddr(), freeAddr()}
	urls := []string{"http://" + addrs[0], "http://" + addrs[1]}
	var objs []*peer.Object
	for _, addr := range addrs {
		node, err := peer.Start(peer.Options{Listen: addr, Peers: urls, Secret: "a secret of the example's"})
		if err != nil {
			log.Fatal(err)
		}
		defer node.Close()
		o, err := node.Open(info)
		if err != nil {
			log.Fatal(err)
		}
		// What the node's cache serves its peers: here, the bytes.
		o.Serve(func(ctx context.Context, p, off int64, b []byte) error {
			copy(b, object[p*pageSize+off:])
			return nil
		})
		objs = append(objs, o)
	}

	a := objs[0]
	fromPeer, owned := 0, 0
	for p := range int64(pages) {
		if a.Owns(p) {
			owned++ // the cache reads it from storage, for the cluster
			continue
		}
		b := make([]byte, 100)
		if err := a.Read(context.Background(), p, 10, b); err != nil {
			log.Fatal(err)
		}
		if bytes.Equal(b, object[p*pageSize+10:][:100]) {
			fromPeer++
		}
	}
	fmt.Println("each page owned once:", owned+int(objs[1].Stats().PagesOwned) == pages)
	fmt.Println("the other's pages read from it, right bytes:", fromPeer == pages-owned)
	// Output:
	// each page owned once: true
	// the other's pages read from it, right bytes: true
}

// freeAddr returns a loopback address with a free port.
func freeAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
