// Package metrics exports the page cache, its storage and the programs'
// own counters as Prometheus metrics, and serves them over HTTP
// (--metrics-addr of ffcvfs mount and ffcvfeed serve).
//
// The counters already exist (pagecache.Stats, storage.RequestStats, the
// mount's and the feed's): the collectors here read them at scrape time
// and hand them to client_golang as constant metrics, so that nothing is
// added to the read path, and client_golang writes the exposition. Only
// FUSE request latencies are observed as they happen (package fs).
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// FlagUsage is the usage text of --metrics-addr.
const FlagUsage = "serve Prometheus metrics at http://`HOST:PORT`/metrics (off by default; a bare :PORT or PORT listens on 127.0.0.1 only; give 0.0.0.0:PORT to expose them)"

// NewRegistry returns a registry holding the Go runtime's and the
// process's collectors, and cs.
func NewRegistry(cs ...prometheus.Collector) (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	cs = append([]prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}, cs...)
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return reg, nil
}

// ListenAddr completes addr (--metrics-addr) into a host:port to listen
// on: a missing host is 127.0.0.1, so that metrics stay on the machine
// unless a host is given.
func ListenAddr(addr string) (string, error) {
	if _, err := strconv.ParseUint(addr, 10, 16); err == nil {
		addr = ":" + addr
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("--metrics-addr %q: want HOST:PORT, :PORT or PORT (e.g. 127.0.0.1:9100)", addr)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return "", fmt.Errorf("--metrics-addr %q: port %q is not a number from 0 to 65535", addr, port)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// Server serves a registry's metrics at /metrics.
type Server struct {
	srv *http.Server
	ln  net.Listener
}

// Serve listens on addr (see ListenAddr) and serves reg's metrics at
// /metrics until Close. Errors of the HTTP server are logged to log.
func Serve(addr string, reg *prometheus.Registry, log *slog.Logger) (*Server, error) {
	addr, err := ListenAddr(addr)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		Registry: reg, // promhttp_metric_handler_errors_total
	}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintln(w, "Prometheus metrics are at /metrics")
	})
	s := &Server{ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the server, letting scrapes under way finish for a second.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return s.srv.Shutdown(ctx)
}

// collectFunc is a prometheus.Collector made of a function that sends
// constant metrics. It is "unchecked" (Describe sends nothing): the
// metrics it sends depend on the state (tiers, causes seen), and the
// registry still checks each scrape for duplicates and consistency.
type collectFunc func(ch chan<- prometheus.Metric)

func (f collectFunc) Describe(chan<- *prometheus.Desc)    {}
func (f collectFunc) Collect(ch chan<- prometheus.Metric) { f(ch) }

// Func returns a Collector that calls f at every scrape with an Emitter of
// namespace ns.
func Func(ns string, f func(e *Emitter)) prometheus.Collector {
	return collectFunc(func(ch chan<- prometheus.Metric) { f(&Emitter{ns: ns, ch: ch}) })
}

// Emitter sends constant metrics named in one namespace to a Collect
// call's channel.
type Emitter struct {
	ns string
	ch chan<- prometheus.Metric
}

// Counter sends a counter; labels alternate names and values.
func (e *Emitter) Counter(name, help string, v float64, labels ...string) {
	e.send(name, help, prometheus.CounterValue, v, labels)
}

// Gauge sends a gauge; labels alternate names and values.
func (e *Emitter) Gauge(name, help string, v float64, labels ...string) {
	e.send(name, help, prometheus.GaugeValue, v, labels)
}

func (e *Emitter) send(name, help string, t prometheus.ValueType, v float64, labels []string) {
	names, values := make([]string, 0, len(labels)/2), make([]string, 0, len(labels)/2)
	for i := 0; i+1 < len(labels); i += 2 {
		names, values = append(names, labels[i]), append(values, labels[i+1])
	}
	e.ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(e.ns+"_"+name, help, names, nil), t, v, values...)
}
