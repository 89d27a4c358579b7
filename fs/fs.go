package fs

import (
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/control"
	"github.com/ffcvfs/ffcvfs/fs/orders"
	"github.com/ffcvfs/ffcvfs/internal/sockpath"
	"github.com/ffcvfs/ffcvfs/order"
	"github.com/ffcvfs/ffcvfs/pagecache"
	"github.com/prometheus/client_golang/prometheus"
)

// Options configures the ImageFolder view.
type Options struct {
	// ImageField and LabelField name the fields served. Defaults: the first
	// RGB image field, and "label".
	ImageField, LabelField string
	// Classes names the class folders, one per label in label order. The
	// names must sort in label order, as ImageFolder assigns indices by
	// sorted name. Default: zero-padded label numbers.
	Classes []string
	// NoFileNames names files by sample id even when the beton keeps its
	// files' paths (beton.PathField, ffcvfs write --keep-names); by
	// default such a beton is served as the tree it was written from.
	NoFileNames bool
	// KernelCache lets the kernel cache file contents. Off by default, so
	// that the page cache's budget is the real memory use.
	KernelCache bool
	// Timeout is how long the kernel may cache attributes and entries,
	// which never change (default 24 h).
	Timeout time.Duration
	// Mtime is the time reported for every file (default: now); the
	// beton's modification time is a good choice.
	Mtime time.Time
	// Owner is the uid allowed to announce orders through the announce
	// socket, besides root (default: the process's uid).
	Owner uint32
	// ControlDir is where the announce socket's folder (0700, removed at
	// Close) is made: default $XDG_RUNTIME_DIR when set, else the
	// system's temporary folder, else /tmp: the first where the socket's
	// path fits (sockpath).
	ControlDir string
	// OrderBatchSize sets the window of quasi-random orders served under
	// orders/ (default 256; see package order).
	OrderBatchSize int
	// PlanLease withdraws an announced order none of whose samples was
	// read for this long (default 10 minutes); see orders.Leases.
	PlanLease time.Duration
	// Compat switches off kernel features the mount uses where the kernel
	// offers them, to serve as on an older kernel or to measure what each
	// buys. The files read the same either way.
	Compat Compat
	// RequestTimes keeps a histogram of FUSE request times per opcode,
	// exported by Collector (--metrics-addr).
	RequestTimes bool
	Logger       *slog.Logger
}

// Compat names kernel features the mount uses when the kernel offers them;
// a field set to true does without one.
type Compat struct {
	// Opens: answer OPEN, and have files read with direct I/O, as on a
	// kernel without zero-message opens (FUSE 7.23, Linux 3.14). By
	// default the first OPEN is answered ENOSYS, so the kernel sends no
	// OPEN or RELEASE from then on and reads every file through its page
	// cache, whose copies are then bounded by invalidation (kernelCopies).
	Opens bool
	// Flush: answer FLUSH, so the kernel sends one at every close, instead
	// of FOPEN_NOFLUSH and ENOSYS.
	Flush bool
	// SmallReads: READs of at most 128 KiB (the kernel's default) instead
	// of 1 MiB, so a larger file takes several.
	SmallReads bool
}

// CompatNames are the names ParseCompat takes, one per Compat field.
var CompatNames = []string{"opens", "flush", "small-reads"}

// ParseCompat reads a comma-separated list of CompatNames.
func ParseCompat(list string) (Compat, error) {
	var c Compat
	for _, name := range strings.Split(list, ",") {
		switch strings.TrimSpace(name) {
		case "":
		case "opens":
			c.Opens = true
		case "flush":
			c.Flush = true
		case "small-reads":
			c.SmallReads = true
		default:
			return c, fmt.Errorf("unknown FUSE feature %q (known: %s)", name, strings.Join(CompatNames, ", "))
		}
	}
	return c, nil
}

// Validate fills defaults.
func (o *Options) Validate() error {
	if o.LabelField == "" {
		o.LabelField = "label"
	}
	if o.Timeout == 0 {
		o.Timeout = 24 * time.Hour
	}
	if o.Mtime.IsZero() {
		o.Mtime = time.Now()
	}
	if o.Owner == 0 {
		o.Owner = uint32(os.Getuid())
	}
	if o.OrderBatchSize == 0 {
		o.OrderBatchSize = 256
	}
	if o.PlanLease == 0 {
		o.PlanLease = 10 * time.Minute
	}
	if o.ControlDir == "" {
		// Where the socket's path fits in a socket's 107 bytes, whatever
		// TMPDIR is: $XDG_RUNTIME_DIR, the temporary folder, or /tmp.
		dir, err := sockpath.Parent(orders.SocketPathExtra)
		if err != nil {
			return fmt.Errorf("announce socket: %w", err)
		}
		o.ControlDir = dir
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Timeout < 0 || o.OrderBatchSize < 0 || o.PlanLease < 0 {
		return fmt.Errorf("timeout, order batch size and plan lease must not be negative")
	}
	if o.OrderBatchSize > order.MaxBatchSize {
		return fmt.Errorf("order batch size %d is out of range; want 1 to %d", o.OrderBatchSize, order.MaxBatchSize)
	}
	return nil
}

// View is the ImageFolder view of one beton: which samples are in which
// class folder, under which names. Immutable after New.
type View struct {
	cache *pagecache.Cache
	f     *beton.File
	opts  Options
	image int // field index
	label int // field index

	gid      uint32     // group of every file, the mount process's
	classes  []string   // folder name per class folder
	labelOf  []int64    // label of each class folder
	members  [][]uint32 // sample ids of each class folder, ascending
	classIdx []int32    // class folder of each sample, or -1 if not served
	ifIndex  []uint32   // sample id of each ImageFolder index
	ifOf     []int32    // ImageFolder index of each sample, or -1
	idWidth  int        // digits of a sample file name
	named    *namedTree // the files' own names and folders (names.go), or nil

	errs     errorLog
	reads    readCounters
	requests requestCounts
	// latency has a histogram of request times per opcode with
	// Options.RequestTimes; nil otherwise.
	latency    *[numOps]prometheus.Observer
	latencyVec *prometheus.HistogramVec
	kcopies    *kernelCopies
	leases     *orders.Leases
	// noOpen is set once the kernel has offered zero-message opens, at
	// INIT, before any other request.
	noOpen atomic.Bool
	// protocol is the kernel's FUSE protocol version, from INIT.
	protocol string

	// announcer serves the announce socket (.ffcvfs/announce).
	announcer *orders.Announcer
}

type readCounters struct {
	images                  atomic.Uint64 // sample files read from offset 0
	jpgImages, restarts     atomic.Uint64 // of which JPEGs, and with restart markers
	jpg, ppm, beton, errors atomic.Uint64
	jpgBytes, ppmBytes      atomic.Uint64
	betonBytes              atomic.Uint64
}

// NewView builds the ImageFolder view of the cache's beton.
func NewView(c *pagecache.Cache, opts Options) (*View, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	f := c.File()
	v := &View{cache: c, f: f, opts: opts, image: -1, gid: uint32(os.Getgid())}
	v.errs = errorLog{log: opts.Logger, seen: map[string]int{}}
	if opts.RequestTimes {
		v.latencyVec, v.latency = newLatency()
	}
	if v.image = f.ImageField(opts.ImageField); v.image < 0 {
		if opts.ImageField == "" {
			return nil, fmt.Errorf("%s has no RGB image field to serve", f.Name())
		}
		return nil, fmt.Errorf("%s has no field %q (fields: %s)", f.Name(), opts.ImageField, f.FieldNames())
	}
	if t := f.Fields()[v.image].Type; t != beton.TypeRGBImage {
		return nil, fmt.Errorf("%s: field %q is a %s field, not an RGB image", f.Name(), opts.ImageField, t)
	}
	v.label = f.FieldIndex(opts.LabelField)
	if v.label < 0 {
		return nil, fmt.Errorf("%s has no field %q to take labels from (fields: %s); choose one with --label-field", f.Name(), opts.LabelField, f.FieldNames())
	}
	if t := f.Fields()[v.label].Type; t != beton.TypeInt {
		return nil, fmt.Errorf("%s: label field %q is a %s field, not an int", f.Name(), opts.LabelField, t)
	}
	if f.HasNames() && !opts.NoFileNames {
		if opts.Classes != nil {
			return nil, fmt.Errorf("%s keeps its files' paths, which name the class folders: give no class list, or serve it without its names (--no-file-names)", f.Name())
		}
		names, err := f.Names()
		if err != nil {
			return nil, err
		}
		if err := v.buildNamed(names); err != nil {
			return nil, err
		}
	} else if err := v.buildClasses(); err != nil {
		return nil, err
	}
	v.kcopies = newKernelCopies(f, c.Stats().Slots >= f.NumPages()) // started by Mount, if files are read through the page cache
	c.OnEvict(v.kcopies.evict)
	v.leases = orders.NewLeases(c, orders.Options{Owner: opts.Owner, Lease: opts.PlanLease, Samples: f.NumSamples(),
		BeforeAnnounce: v.kcopies.dropAll, Logger: opts.Logger})
	var err error
	if v.announcer, err = orders.StartAnnouncer(v.opts.ControlDir, v.leases, orders.Samples{N: f.NumSamples(), ImageFolder: v.ifIndex}); err != nil {
		v.leases.Close()
		return nil, err
	}
	return v, nil
}

// Close stops what the view runs in the background, after unmounting.
func (v *View) Close() {
	v.announcer.Close()
	v.cache.OnEvict(nil)
	v.kcopies.close()
	v.leases.Close()
}

// maxLabel bounds the labels the view serves: a label names a class
// folder (and, with Options.Classes, a line of the class list).
const maxLabel = 1 << 24

// buildClasses groups samples by label into class folders and numbers them
// as ImageFolder will: by sorted folder name, then by sorted file name.
// Its memory and time grow with the samples, never with the labels' values:
// only labels that samples have get a folder (a beton of one sample
// labelled 2^24 makes one folder, not 2^24).
func (v *View) buildClasses() error {
	f := v.f
	n := f.NumSamples()
	labels := make([]int64, n)
	for s := range n {
		l := f.Int(s, v.label)
		if l < 0 || l > maxLabel {
			return fmt.Errorf("%s: sample %d has label %d; labels must be in [0, %d]", f.Name(), s, l, maxLabel)
		}
		labels[s] = l
	}
	// The distinct labels, ascending, and each sample's rank among them.
	distinct := slices.Clone(labels)
	slices.Sort(distinct)
	distinct = slices.Compact(distinct)
	maxL := int64(-1)
	if len(distinct) > 0 {
		maxL = distinct[len(distinct)-1]
	}
	names := v.opts.Classes
	if names != nil && int64(len(names)) < maxL+1 {
		return fmt.Errorf("%d class names given, but labels go up to %d", len(names), maxL)
	}
	if names != nil && int64(len(names)) > maxL+1 {
		// A beton may lack its last classes (a subset); a list of another
		// beton's classes looks the same, and is said.
		v.opts.Logger.Warn(fmt.Sprintf("%d class names given, but the labels of %s go up to %d: the first %d names are used; "+
			"if the list is another beton's, its names are wrong here (ffcvfs write --classes-out writes a beton's own)",
			len(names), f.Name(), maxL, maxL+1))
	}
	for i, name := range names {
		if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") || name == control.Dir {
			return fmt.Errorf("class name %q (line %d) cannot be a folder name", name, i+1)
		}
		if i > 0 && names[i-1] >= name {
			return fmt.Errorf("class names must sort in label order, since ImageFolder numbers classes by sorted name: %q (label %d) sorts before or equal to %q (label %d)", name, i, names[i-1], i-1)
		}
	}
	w := len(fmt.Sprint(max(maxL, 0)))
	nameOf := func(l int64) string {
		if names != nil {
			return names[l]
		}
		return fmt.Sprintf("%0*d", w, l)
	}
	members := make([][]uint32, len(distinct))
	for s, l := range labels {
		ci, _ := slices.BinarySearch(distinct, l)
		members[ci] = append(members[ci], uint32(s))
	}
	folders := make([]string, len(distinct))
	for ci, l := range distinct {
		folders[ci] = nameOf(l)
	}
	v.setClasses(folders, members)
	v.labelOf = distinct
	if empty := maxL + 1 - int64(len(distinct)); empty > 0 {
		first := int64(0)
		for i, l := range distinct {
			if l != int64(i) {
				first = int64(i)
				break
			}
		}
		v.opts.Logger.Warn("labels without samples get no folder, so ImageFolder's class indices will not equal these labels", "empty", empty, "first", nameOf(first))
	}
	v.idWidth = len(fmt.Sprint(max(n-1, 0)))
	return nil
}

// setClasses makes the class folders: their names, sorted, and their
// samples, each folder's in ImageFolder's order; the ImageFolder indices
// follow from them.
func (v *View) setClasses(names []string, members [][]uint32) {
	n := v.f.NumSamples()
	v.classes, v.members = names, members
	v.classIdx = make([]int32, n)
	v.ifOf = make([]int32, n)
	v.ifIndex = make([]uint32, 0, n)
	for ci, m := range members {
		for _, s := range m {
			v.classIdx[s] = int32(ci)
			v.ifOf[s] = int32(len(v.ifIndex))
			v.ifIndex = append(v.ifIndex, s)
		}
	}
}

// Classes returns the class folder names, in ImageFolder order.
func (v *View) Classes() []string { return slices.Clone(v.classes) }

// SampleName returns the file name of sample s, with the extension of its
// stored image.
func (v *View) SampleName(s int) string {
	if v.named != nil {
		return v.named.base[s]
	}
	m := v.f.Record(s)[v.f.RecordLayout().Offsets[v.image]]
	ext := ".jpg"
	if beton.ImageMode(m) == beton.ModeRaw {
		ext = ".ppm"
	}
	return fmt.Sprintf("%0*d%s", v.idWidth, s, ext)
}

// ImageFolderIndex returns the index ImageFolder gives sample s, or -1.
func (v *View) ImageFolderIndex(s int) int { return int(v.ifOf[s]) }

// SampleOf returns the sample at ImageFolder index i.
func (v *View) SampleOf(i int) (int, bool) {
	if i < 0 || i >= len(v.ifIndex) {
		return 0, false
	}
	return int(v.ifIndex[i]), true
}

// ppmHeader returns the P6 header of a raw image.
func ppmHeader(w, h int) string { return fmt.Sprintf("P6\n%d %d\n255\n", w, h) }

// sampleSize returns the size of sample s's file, and its image metadata.
func (v *View) sampleSize(s int) (int64, beton.Image, error) {
	img, err := v.f.Image(s, v.image)
	if err != nil {
		return 0, img, err
	}
	if img.Mode == beton.ModeRaw {
		return int64(len(ppmHeader(img.Width, img.Height))) + int64(img.Size), img, nil
	}
	return int64(img.Size), img, nil
}
