package feed

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ffcvfs/ffcvfs/internal/testenv"
	"github.com/ffcvfs/ffcvfs/order"
	"github.com/ffcvfs/ffcvfs/pagecache"
	"github.com/ffcvfs/ffcvfs/pipeline"
	"github.com/ffcvfs/ffcvfs/pipeline/decode"
	"github.com/ffcvfs/ffcvfs/storage"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// testPipeline is a pipeline over the 200 photos of the fixture beton in
// batches of 64: 4 batches an epoch.
func testPipeline(t *testing.T) *pipeline.Pipeline {
	t.Helper()
	src, f, err := pagecache.OpenBeton(t.Context(), testenv.Fixture(t, "beton", "imagefolder-jpg.beton"), storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	c, err := pagecache.New(src, f, pagecache.Options{Budget: 4 * f.PageSize()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	p, err := pipeline.New(c, pipeline.Options{BatchSize: 64, Workers: 2, Op: decode.Op{Kind: decode.CenterCrop, OutW: 16, OutH: 16}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func testOptions(t *testing.T) Options {
	return Options{Socket: testenv.Socket(t, "feed.sock"), Slots: 2, Epochs: 2, BatchSize: 64, Logger: quiet}
}

// consume reads the stream as a client does, releasing each batch, and
// returns the epoch and batch of each, until the end of the stream.
func consume(t *testing.T, socket string) [][2]int {
	t.Helper()
	conn, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rd := bufio.NewReader(conn)
	var got [][2]int
	for {
		conn.SetReadDeadline(time.Now().Add(testenv.Patience))
		line, err := rd.ReadBytes('\n')
		if err != nil {
			t.Fatalf("after %v: %v", got, err)
		}
		var m struct {
			Hello, Slot, Epoch, Batch *int
			End                       bool
		}
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		switch {
		case m.End:
			return got
		case m.Hello != nil:
		case m.Slot != nil:
			got = append(got, [2]int{*m.Epoch, *m.Batch})
			fmt.Fprintf(conn, "{\"release\":%d}\n", *m.Slot)
		}
	}
}

// A stream runs from its start to the end of its last epoch, then ends.
func TestRunFromStart(t *testing.T) {
	o := testOptions(t)
	o.StartBatch = 2
	s, err := New(testPipeline(t), o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	done := make(chan error, 1)
	go func() { done <- s.Run(t.Context()) }()
	got := consume(t, o.Socket)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want := [][2]int{{0, 2}, {0, 3}, {1, 0}, {1, 1}, {1, 2}, {1, 3}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("batches %v, want %v", got, want)
	}
	if s.Epoch() != 1 || s.Server().Stats().Published != 6 {
		t.Errorf("epoch %d, %d published; want 1 and 6", s.Epoch(), s.Server().Stats().Published)
	}
}

// A resumed epoch of which nothing is left starts the stream at the next
// one; when it is the last, there is nothing to serve.
func TestResumeNothingLeft(t *testing.T) {
	p := testPipeline(t)
	o := testOptions(t)
	o.Resumed = []order.Segment{{WorldSize: 1, Position: 200}}
	s, err := New(p, o)
	if err != nil {
		t.Fatal(err)
	}
	if s.Epoch() != 1 {
		t.Errorf("starts at epoch %d, want 1", s.Epoch())
	}
	s.Close()
	o = testOptions(t)
	o.Epochs, o.Resumed = 1, []order.Segment{{WorldSize: 1, Position: 200}}
	var re *ResumeError
	if _, err := New(p, o); !errors.As(err, &re) || re.Epoch != 0 {
		t.Fatalf("the last epoch, all read: %v, want a ResumeError", err)
	}
}

// A start out of the data's range is a StartError naming the option, and
// nothing is left behind.
func TestStartErrors(t *testing.T) {
	p := testPipeline(t)
	for _, c := range []struct {
		set    func(*Options)
		option string
	}{
		{func(o *Options) { o.StartEpoch = 2 }, "StartEpoch"},
		{func(o *Options) { o.StartEpoch = -1 }, "StartEpoch"},
		{func(o *Options) { o.StartBatch = 4 }, "StartBatch"},
		{func(o *Options) { o.StartBatch = -1 }, "StartBatch"},
		{func(o *Options) { o.StartBatch, o.Resumed = 1, []order.Segment{{WorldSize: 2, Position: 10}} }, "StartBatch"},
	} {
		o := testOptions(t)
		c.set(&o)
		var se *StartError
		if _, err := New(p, o); !errors.As(err, &se) || se.Option != c.option {
			t.Errorf("%+v: %v, want a StartError of %s", o, err, c.option)
		}
		if m, _ := filepath.Glob(filepath.Join(filepath.Dir(o.Socket), "*")); len(m) != 0 {
			t.Errorf("left %v", m)
		}
	}
}

// A stream whose context ends stops without error.
func TestRunStops(t *testing.T) {
	o := testOptions(t)
	s, err := New(testPipeline(t), o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	// A client that takes the first batch and holds it: the stream is
	// under way, waiting for a slot.
	conn, err := net.Dial("unix", o.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(testenv.Patience))
	rd := bufio.NewReader(conn)
	for _, want := range []string{`"hello"`, `"slot"`} {
		if line, err := rd.ReadString('\n'); err != nil || !strings.Contains(line, want) {
			t.Fatalf("read %q, %v; want %s", line, err, want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after its context ended: %v", err)
	}
}
