package main

import (
	"log/slog"

	"github.com/ffcvfs/ffcvfs/feed"
	"github.com/ffcvfs/ffcvfs/internal/metrics"
)

// serveMetrics serves ffcvfeed serve's metrics at addr: the pipeline's,
// the server's (ring slots, consumers), and its cache's and storage's.
func serveMetrics(addr string, fd *fed, s *feed.Stream) (*metrics.Server, error) {
	m := metrics.Func("ffcvfeed", func(e *metrics.Emitter) {
		p := fd.p
		e.Counter("images_total", "Images decoded, augmented and written into batches (rate(): images/s).", float64(p.Images.Load()))
		e.Counter("jpeg_images_total", "JPEG images decoded.", float64(p.JPEGs.Load()))
		e.Counter("jpeg_images_with_restarts_total", "JPEG images decoded that had restart markers a crop is decoded from (ffcvfs write --from-beton adds them to a beton that lacks them).", float64(p.Restarts.Load()))
		e.Counter("decode_errors_total", "Samples that failed to read or decode (replaced by another of their batch, or failing it with --on-error fail).", float64(p.Errors.Load()))
		st := s.Server().Stats()
		e.Counter("batches_total", "Batches published to the ring.", float64(st.Published))
		e.Gauge("epoch", "The epoch being delivered.", float64(s.Epoch()))
		const slots = "Ring slots by state: free, filling (being decoded into), queued (published, not yet sent), delivered (held by the client)."
		e.Gauge("ring_slots", slots, float64(st.SlotsFree), "state", "free")
		e.Gauge("ring_slots", slots, float64(st.SlotsFilling), "state", "filling")
		e.Gauge("ring_slots", slots, float64(st.SlotsQueued), "state", "queued")
		e.Gauge("ring_slots", slots, float64(st.SlotsDelivered), "state", "delivered")
		e.Gauge("ring_slots_in_use", "Ring slots not free (filling, queued or delivered).", float64(st.SlotsFilling+st.SlotsQueued+st.SlotsDelivered))
		e.Gauge("clients_connected", "Clients connected to the socket (at most 1).", float64(st.Connected))
		e.Counter("client_connections_total", "Clients served since the start.", float64(st.Connections))
		e.Counter("client_refused_total", "Clients turned away because another was connected.", float64(st.Refused))
		if fd.decoded != nil {
			d := fd.decoded.Stats()
			e.Counter("decoded_cache_hits_total", "JPEG images made from the decoded-image cache (--decoded-cache-size), not decoded.", float64(d.Hits))
			e.Counter("decoded_cache_misses_total", "JPEG images decoded while the decoded-image cache was on (the first epoch's, and those it does not hold).", float64(d.Misses))
			e.Counter("decoded_cache_not_held_total", "JPEG images the decoded-image cache did not take: no room, or a sampling layout it does not hold.", float64(d.NotHeld))
			e.Counter("decoded_cache_corrupt_total", "Images on the decoded-image cache's disk that failed their checksum (each decoded from its JPEG instead).", float64(d.Corrupt))
			const where = "Bytes of planes the decoded-image cache holds, in RAM or on disk."
			e.Gauge("decoded_cache_bytes", where, float64(d.RAMBytes), "where", "ram")
			e.Gauge("decoded_cache_bytes", where, float64(d.DiskBytes), "where", "disk")
			const images = "Images the decoded-image cache holds, in RAM or on disk."
			e.Gauge("decoded_cache_images", images, float64(d.RAMImages), "where", "ram")
			e.Gauge("decoded_cache_images", images, float64(d.DiskImages), "where", "disk")
			const size = "The decoded-image cache's sizes (--decoded-cache-size, --decoded-cache-disk-size)."
			e.Gauge("decoded_cache_size_bytes", size, float64(d.RAMSize), "where", "ram")
			e.Gauge("decoded_cache_size_bytes", size, float64(d.DiskSize), "where", "disk")
		}
	})
	reg, err := metrics.NewRegistry(m, metrics.Cache("ffcvfeed", fd.Cache, fd.Source))
	if err != nil {
		return nil, err
	}
	return metrics.Serve(addr, reg, slog.Default())
}
