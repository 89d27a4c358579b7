// Package feed streams a pipeline's batches to one consumer: it makes the
// shared-memory ring and the socket server of package cudafeed, and runs
// the pipeline's epochs into the ring from where the stream starts, a
// batch of an epoch or the rest of an epoch resumed at another world size,
// to the last epoch, then waits for the consumer to take the end of the
// stream. ffcvfeed serve is its one caller; a Go program that feeds a
// consumer of its own calls it the same way.
//
// A Stream stops early, without error, when its context ends (a signal, or
// the end of the process that started the server): its ring and socket go
// at Close.
package feed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/ffcvfs/ffcvfs/cudafeed"
	"github.com/ffcvfs/ffcvfs/order"
	"github.com/ffcvfs/ffcvfs/pipeline"
)

// A StartError is a start out of the range of the data: a StartEpoch
// past Epochs, a StartBatch past an epoch's batches, or both a StartBatch
// and Resumed parts.
type StartError struct {
	Option string // the field of Options: "StartEpoch" or "StartBatch"
	Value  int
	Reason string
}

func (e *StartError) Error() string { return fmt.Sprintf("%s %d: %s", e.Option, e.Value, e.Reason) }

// A ResumeError is an epoch whose rest could not be made from its Resumed
// parts, or of which nothing is left when it is the last.
type ResumeError struct {
	Epoch int
	Err   error
}

func (e *ResumeError) Error() string { return fmt.Sprintf("resuming epoch %d: %v", e.Epoch, e.Err) }
func (e *ResumeError) Unwrap() error { return e.Err }

// DrainTimeout bounds the wait for the consumer to take the end of the
// stream once every batch is published.
const DrainTimeout = 30 * time.Second

// Options says where a stream starts and ends and where it goes.
type Options struct {
	// Socket is the Unix socket the consumer connects to (created 0600).
	Socket string
	// Slots is the number of batches in shared memory at once.
	Slots int
	// Epochs is the number of epochs, StartEpoch the first delivered and
	// StartBatch its first batch: the earlier ones are neither read nor
	// announced.
	Epochs, StartEpoch, StartBatch int
	// Resumed, when set, are the parts of StartEpoch read before at other
	// world sizes; the stream serves this rank's share of the rest of
	// StartEpoch, then the epochs after it. StartBatch must then be 0.
	Resumed []order.Segment
	// WorldSize and BatchSize describe the pipeline's order to the
	// consumer (cudafeed.StreamInfo), for resuming it elsewhere, and
	// Mixture its mixture of sources (pipeline.Fingerprint).
	WorldSize, BatchSize int
	Mixture              string
	// Device, when set, prepares the device side of the ring (a
	// cudafeed.DeviceRing); close runs after the server's Close and before
	// the ring's. Nil: the host ring only.
	Device func(*cudafeed.Ring) (slots cudafeed.DeviceSlots, close func() error, err error)
	// Logger gets the stream's progress: epochs done, a stop. Default:
	// slog.Default().
	Logger *slog.Logger
}

// A Stream is a pipeline served through a ring and its socket.
type Stream struct {
	p       *pipeline.Pipeline
	o       Options
	nb      int            // batches per epoch
	rest    *pipeline.Rest // the rest of StartEpoch after Resumed; nil: none
	ring    *cudafeed.Ring
	srv     *cudafeed.Server
	closeDv func() error
	epoch   atomic.Int64
}

// New checks where the stream starts against the pipeline's epochs (a
// *StartError or a *ResumeError), makes the ring (a /dev/shm too small for
// it is a *cudafeed.ShmFullError) and listens on the socket. The caller runs it with Run and closes it.
func New(p *pipeline.Pipeline, o Options) (*Stream, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Epochs < 1 || o.StartEpoch < 0 || o.StartEpoch >= o.Epochs {
		return nil, &StartError{"StartEpoch", o.StartEpoch, fmt.Sprintf("want 0 to %d (the epochs less one)", o.Epochs-1)}
	}
	if o.Resumed != nil && o.StartBatch != 0 {
		return nil, &StartError{"StartBatch", o.StartBatch, "a resumed epoch starts where its parts say"}
	}
	s := &Stream{p: p, o: o}
	var err error
	if s.nb, err = p.BatchesPerEpoch(); err != nil {
		return nil, err
	}
	if o.StartBatch < 0 || o.StartBatch >= s.nb {
		return nil, &StartError{"StartBatch", o.StartBatch, fmt.Sprintf("an epoch has batches 0 to %d", s.nb-1)}
	}
	if o.Resumed != nil {
		// The rest of the epoch stands in its last batches.
		if s.rest, err = p.Rest(o.StartEpoch, o.Resumed); err != nil {
			return nil, &ResumeError{o.StartEpoch, err}
		}
		switch {
		case s.rest.Batches > 0:
			s.o.StartBatch = s.rest.Start
		case o.StartEpoch+1 >= o.Epochs:
			return nil, &ResumeError{o.StartEpoch, fmt.Errorf("nothing is left of it, the last of %d epochs", o.Epochs)}
		default:
			o.Logger.Info("nothing is left of the resumed epoch: starting at the next", "epoch", o.StartEpoch+1)
			s.o.StartEpoch, s.o.Resumed, s.rest = o.StartEpoch+1, nil, nil
		}
	}
	stream := cudafeed.StreamInfo{WorldSize: max(1, o.WorldSize), BatchSize: o.BatchSize, Mixture: o.Mixture}
	for _, seg := range s.o.Resumed {
		stream.Segments = append(stream.Segments, [2]int{seg.WorldSize, seg.Position})
	}
	if removed, err := cudafeed.CleanStaleRings(); err != nil {
		o.Logger.Warn("looking for rings of dead servers", "err", err)
	} else if len(removed) > 0 {
		o.Logger.Info("removed the rings of dead servers", "rings", removed)
	}
	if s.ring, err = cudafeed.CreateServerRing(cudafeed.RingSpec{Fields: p.Fields(), Slots: o.Slots}); err != nil {
		return nil, err
	}
	var dev cudafeed.DeviceSlots
	s.closeDv = func() error { return nil }
	if o.Device != nil {
		if dev, s.closeDv, err = o.Device(s.ring); err != nil {
			s.ring.Close()
			return nil, err
		}
	}
	s.srv, err = cudafeed.NewServer(s.ring, cudafeed.Options{SocketPath: o.Socket, BatchesPerEpoch: s.nb, Epochs: o.Epochs, Device: dev,
		StartEpoch: s.o.StartEpoch, StartBatch: s.o.StartBatch, Stream: stream, Logger: o.Logger})
	if err != nil {
		s.closeDv()
		s.ring.Close()
		return nil, err
	}
	s.epoch.Store(int64(s.o.StartEpoch))
	return s, nil
}

// Server is the socket server, for its Stats.
func (s *Stream) Server() *cudafeed.Server { return s.srv }

// RingPath is the ring's shared-memory file.
func (s *Stream) RingPath() string { return s.ring.Path() }

// BatchesPerEpoch is the number of batches of a whole epoch.
func (s *Stream) BatchesPerEpoch() int { return s.nb }

// Epoch is the epoch being delivered.
func (s *Stream) Epoch() int { return int(s.epoch.Load()) }

// Run delivers the epochs, then waits until the consumer has released
// every slot and been sent the end of the stream (at most DrainTimeout for
// the end). When ctx ends, Run stops early and returns nil.
func (s *Stream) Run(ctx context.Context) error {
	sink := serverSink{srv: s.srv, ring: s.ring}
	for e := s.o.StartEpoch; e < s.o.Epochs; e++ {
		start, from := time.Now(), 0
		if e == s.o.StartEpoch {
			from = s.o.StartBatch
		}
		s.epoch.Store(int64(e))
		var n int
		var err error
		if e == s.o.StartEpoch && s.rest != nil {
			n, err = s.p.RunRest(ctx, s.rest, sink)
		} else {
			n, err = s.p.RunEpochFrom(ctx, e, from, sink)
		}
		if err != nil {
			if ctx.Err() != nil {
				// The stream ends early, as asked; the ring and the
				// socket go at Close.
				s.o.Logger.Info("stopped", "epoch", e)
				return nil
			}
			return err
		}
		attrs := []any{"epoch", e, "images", n, "images_per_s", fmt.Sprintf("%.0f", float64(n)/time.Since(start).Seconds()), "errors", s.p.Errors.Load()}
		if t := s.p.Decoded(); t != nil {
			st := t.Stats()
			attrs = append(attrs, "decoded_cache_hits", st.Hits, "decoded_cache_images", st.RAMImages+st.DiskImages,
				"decoded_cache_bytes", st.RAMBytes+st.DiskBytes)
		}
		s.o.Logger.Info("epoch done", attrs...)
	}
	for i := 0; i < s.ring.Slots(); i++ {
		if _, err := s.srv.AcquireSlot(ctx); err != nil {
			return nil
		}
	}
	drain, cancel := context.WithTimeout(ctx, DrainTimeout)
	defer cancel()
	if err := s.srv.Drain(drain); err != nil {
		s.o.Logger.Warn("the consumer did not receive the end of the stream", "err", err)
	}
	return nil
}

// Close stops the server, then releases the device side and the ring.
func (s *Stream) Close() error {
	err := s.srv.Close()
	if derr := s.closeDv(); derr != nil {
		s.o.Logger.Warn("closing the device ring", "err", derr)
	}
	return errors.Join(err, s.ring.Close())
}

// serverSink is the ring as the pipeline writes into it.
type serverSink struct {
	srv  *cudafeed.Server
	ring *cudafeed.Ring
}

func (s serverSink) Acquire(ctx context.Context) (int, error) { return s.srv.AcquireSlot(ctx) }
func (s serverSink) Buffers(slot int) [][]byte                { return s.ring.Slot(slot) }
func (s serverSink) Publish(slot, epoch, batch, size int) error {
	return s.srv.Publish(slot, epoch, batch, size)
}
