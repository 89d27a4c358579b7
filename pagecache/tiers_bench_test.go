package pagecache

import (
	"bytes"
	"os"
	"testing"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/pagecache/tier"
)

// BenchmarkTierCodec encodes and decodes every data page of the betons in
// $FFCVFS_TIER_BETONS (space-separated paths) as the tiers store them, and
// reports the compression ratio (raw bytes per stored byte) and the
// decoding time per page (decode-ns/page).
func BenchmarkTierCodec(b *testing.B) {
	paths := bytes.Fields([]byte(os.Getenv("FFCVFS_TIER_BETONS")))
	if len(paths) == 0 {
		b.Skip("FFCVFS_TIER_BETONS names no beton")
	}
	for _, p := range paths {
		data, err := os.ReadFile(string(p))
		if err != nil {
			b.Fatal(err)
		}
		f, err := beton.Open(bytes.NewReader(data), int64(len(data)), string(p))
		if err != nil {
			b.Fatal(err)
		}
		layout := layouts(f)
		ps := f.PageSize()
		var entries [][]byte
		var raw, stored int64
		for dp := range int32(f.NumPages()) {
			off := f.PageOffset(int64(dp) + f.FirstPage())
			page := make([]byte, ps)
			copy(page, data[min(off, int64(len(data))):])
			e, err := tier.EncodePage(page, dp, layout(dp))
			if err != nil {
				b.Fatal(err)
			}
			entries = append(entries, e)
			raw += ps
			stored += int64(len(e))
		}
		b.Run(string(p[bytes.LastIndexByte(p, '/')+1:]), func(b *testing.B) {
			page := make([]byte, ps)
			b.SetBytes(ps)
			b.ReportAllocs()
			for i := range b.N {
				dp := i % len(entries)
				if err := tier.DecodePage(page, entries[dp], int32(dp)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(raw)/float64(stored), "ratio")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "decode-ns/page")
		})
	}
}
