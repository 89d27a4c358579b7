package order

import (
	"crypto/sha256"
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
)

// Domain tags keep the two kinds of stream apart even for equal words.
const (
	pagesTag  = "ffcvfs/order/v1/pages\x00"
	rankTag   = "ffcvfs/order/v1/rank\x00"
	resumeTag = "ffcvfs/order/v1/resume\x00"
	nodesTag  = "ffcvfs/order/v1/nodes\x00"
)

// stream is a PCG-DXSM generator with its own bounded draws and shuffle, so
// that the order depends on nothing the standard library may change: only
// the PCG output itself, which is a fixed algorithm.
type stream struct{ pcg *rand.PCG }

// newStream seeds a stream with the first 16 bytes of
// SHA-256(tag || words as little-endian uint64), read as two little-endian
// uint64 seeds for rand.NewPCG.
func newStream(tag string, words ...uint64) stream {
	buf := make([]byte, 0, len(tag)+8*len(words))
	buf = append(buf, tag...)
	for _, w := range words {
		buf = binary.LittleEndian.AppendUint64(buf, w)
	}
	sum := sha256.Sum256(buf)
	return stream{rand.NewPCG(binary.LittleEndian.Uint64(sum[0:8]), binary.LittleEndian.Uint64(sum[8:16]))}
}

// pagesStream is the stream of one epoch, the same for every rank: it
// shuffles the pages.
func pagesStream(seed, epoch uint64) stream { return newStream(pagesTag, seed, epoch) }

// rankStream is one rank's stream for an epoch: it draws within the rank.
func rankStream(seed, epoch uint64, rank, worldSize int) stream {
	return newStream(rankTag, seed, epoch, uint64(rank), uint64(worldSize))
}

// nodesStream is the stream of a node-affine order's split of the pages
// among nodes: it depends on the seed alone, so the split holds across
// epochs.
func nodesStream(seed uint64) stream { return newStream(nodesTag, seed) }

// resumeStream is one rank's stream for the rest of an epoch after the
// segments before: its words are those of rankStream followed by each
// earlier segment's world size and position.
func resumeStream(seed, epoch uint64, rank, worldSize int, before []Segment) stream {
	words := make([]uint64, 0, 4+2*len(before))
	words = append(words, seed, epoch, uint64(rank), uint64(worldSize))
	for _, s := range before {
		words = append(words, uint64(s.WorldSize), uint64(s.Position))
	}
	return newStream(resumeTag, words...)
}

// below returns a uniform integer in [0, n), n > 0, by Lemire's
// multiply-and-reject method on 64-bit outputs: the high word of x·n, drawing
// x again while the low word is below 2^64 mod n.
func (s stream) below(n int) int {
	un := uint64(n)
	hi, lo := bits.Mul64(s.pcg.Uint64(), un)
	if lo < un {
		thresh := -un % un
		for lo < thresh {
			hi, lo = bits.Mul64(s.pcg.Uint64(), un)
		}
	}
	return int(hi)
}

// shuffle is Fisher–Yates from the end: for i from n-1 down to 1, swap
// element i with element below(i+1).
func shuffle[T any](s stream, x []T) {
	for i := len(x) - 1; i > 0; i-- {
		j := s.below(i + 1)
		x[i], x[j] = x[j], x[i]
	}
}
