package fs

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ffcvfs/ffcvfs/control"
	"github.com/ffcvfs/ffcvfs/internal/metrics"
)

// latencyBuckets spans a FUSE request's time: tens of microseconds for a
// cached page, to seconds for one waiting on slow storage.
var latencyBuckets = prometheus.ExponentialBuckets(10e-6, 4, 10) // 10 µs … 2.6 s

// newLatency makes the histograms of Options.RequestTimes: the vector and
// its child of each opcode, looked up once.
func newLatency() (*prometheus.HistogramVec, *[numOps]prometheus.Observer) {
	vec := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "ffcvfs", Name: "fuse_request_duration_seconds",
		Help:    "Time the mount spent on FUSE requests, from their arrival to their answer (the write of the reply to the kernel not included), by opcode (the kernel's name, lower-cased).",
		Buckets: latencyBuckets,
	}, []string{"op"})
	var l [numOps]prometheus.Observer
	for i := range l {
		l[i] = vec.WithLabelValues(opNames[i])
	}
	return vec, &l
}

// Collectors returns the mount's metrics: reads, FUSE requests (with
// their times when Options.RequestTimes), the kernel's cache and
// announced orders, named ffcvfs_*. The cache's own are metrics.Cache's.
func (v *View) Collectors() []prometheus.Collector {
	cs := []prometheus.Collector{metrics.Func("ffcvfs", func(e *metrics.Emitter) {
		st := v.viewStats() // the cache's are metrics.Cache's
		const (
			reads     = "READs of files answered, by kind of file (jpg, ppm, dataset.beton)."
			readBytes = "Bytes returned by READs, by kind of file."
		)
		e.Counter("images_read_total", "Sample files read from their start through the mount (reads the kernel serves from its page cache do not reach it).", float64(st.Reads.Images))
		e.Counter("jpg_images_read_total", "JPEG sample files read from their start through the mount.", float64(st.Reads.JPGImages))
		e.Counter("jpg_images_read_with_restarts_total", "JPEG sample files read from their start whose JPEG has restart markers a crop can be decoded from (ffcvfs write --from-beton adds them to a beton that lacks them).", float64(st.Reads.JPGRestarts))
		e.Counter("reads_total", reads, float64(st.Reads.JPG), "file", "jpg")
		e.Counter("reads_total", reads, float64(st.Reads.PPM), "file", "ppm")
		e.Counter("reads_total", reads, float64(st.Reads.Beton), "file", "dataset.beton")
		e.Counter("read_bytes_total", readBytes, float64(st.Reads.JPGBytes), "file", "jpg")
		e.Counter("read_bytes_total", readBytes, float64(st.Reads.PPMBytes), "file", "ppm")
		e.Counter("read_bytes_total", readBytes, float64(st.Reads.BetonBytes), "file", "dataset.beton")
		e.Counter("read_errors_total", "Lookups and reads answered with an error (EIO mostly).", float64(st.Reads.Errors))
		for i, name := range opNames {
			e.Counter("fuse_requests_total", "FUSE requests from the kernel, by opcode.", float64(v.requests[i].Load()), "op", name)
		}
		e.Gauge("kernel_cache_bytes", "Bytes of the mount's files the kernel may hold in its page cache (-1: unbounded, --kernel-cache).", float64(st.FUSE.KernelCacheBytes))
		e.Gauge("gomaxprocs", "Cores the mount's Go code may run on now; it follows the load (ffcvfs mount --help).", float64(st.FUSE.GOMAXPROCS))
		e.Counter("kernel_cache_invalidations_total", "Files and ranges dropped from the kernel's page cache with their page.", float64(st.FUSE.Invalidations))
		e.Counter("announced_total", "Orders announced through "+control.Dir+"/"+control.AnnounceFile+".", float64(st.Announced))
		e.Gauge("samples", "Samples of the beton.", float64(st.Samples))
		e.Gauge("data_bytes", "Bytes of the beton's data pages.", float64(st.DataBytes))
	})}
	if v.latencyVec != nil {
		cs = append(cs, v.latencyVec)
	}
	return cs
}
