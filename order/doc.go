// Package order generates the order in which one rank reads the samples of a
// .beton in one epoch. It is the only generator of sample orders: the files
// under a mount's .ffcvfs/orders/ and the ffcvfeed pipeline both call
// Generate, so a training job that reads an order file and one that feeds
// itself see the same sequence.
//
// # What it owns
//
// The definition of each order kind, of sharding across ranks, and of the
// random streams behind them, down to the bit: an order is a function of the
// PageMap (which samples lie in which page) and of Options, and of nothing
// else. The same inputs give the same order on every run, platform and Go
// release. Options.Kind is one of:
//
//   - sequential: samples in id order. Seed and Epoch are ignored.
//   - random: a uniform random permutation of the samples.
//   - quasi-random (as FFCV's QUASI_RANDOM): random, but page-local, so that
//     a page cache much smaller than the dataset reads each page about once.
//     The pages are shuffled. The first Window pages of that list are open;
//     Generate then repeatedly picks one open page uniformly at random and
//     emits a uniformly random sample of it not emitted yet. When a page has
//     given all its samples, the next page of the shuffled list takes its
//     place; when the list is used up, the window shrinks. At any point of
//     the order at most Window pages have been started and not finished.
//
// # Pages
//
// A page is a data page of the file that holds at least one sample (pages
// holding none are skipped). Samples with no data in any page (scalar fields
// only) form virtual pages of their own, which are shuffled, dealt and
// windowed like data pages: those samples are cut, in id order, into
// virtual pages of the mean data-page size (samples in data pages divided by
// data pages, rounded up), or into WorldSize equal parts when the file has no
// data pages at all. Virtual pages come after the data pages in file order.
//
// # Window
//
// Options.Window is the number of open pages of a quasi-random order. When it
// is zero the window holds about two batches: ceil(2·BatchSize / m), where m
// is the mean number of samples per data page, and at least 2 (MinWindow);
// BatchSize defaults to 256. DefaultWindow computes it. With ImageNet in 8
// MiB pages (about 76 samples a page) and batches of 256, that is 7 pages.
//
// # Sharding
//
// With WorldSize > 1 each rank gets a disjoint set of whole pages: a page is
// never split across ranks, so each rank's page cache reads only its own
// pages. The pages of the epoch, in shuffled order (in file order for
// sequential), are dealt one at a time to the rank with the fewest samples so
// far, the lowest rank on ties; ranks' sample counts then differ by at most
// one page's worth. Every rank of an epoch computes the same shuffle and the
// same deal, so ranks need not talk to each other. The rank's order is then
// made from its own pages: its samples in id order (sequential), a uniform
// permutation of them (random), or the window walk above over its pages in
// the order they were dealt (quasi-random).
//
// Finally every rank is brought to the same count, as torch's
// DistributedSampler does: by default each rank's order is padded up to the
// largest rank's count by repeating samples from the start of its own order
// (cycling through it when it is less than half that count), so padding
// stays on its own pages. Padded samples appear twice (or more) in that rank's epoch:
// a training loop that must see each sample exactly once should set
// DropLast, which instead truncates every rank to the smallest rank's count,
// leaving out up to about a page's worth of samples per rank in that epoch
// (other samples in other epochs, since the deal changes). When a rank gets
// no page at all (fewer pages than ranks), padding has nothing to repeat and
// Generate fails with ErrTooFewPages; with DropLast every rank's order is
// then empty.
//
// # Node-affine orders
//
// With Options.Nodes N > 1 the WorldSize ranks form N nodes of R =
// WorldSize/N consecutive ranks, and the order keeps each node's pages at
// home: the units (pages, virtual pages included) are shuffled once, by the
// nodes stream below, which depends on Seed alone, into a ring; node k holds
// the arc of units floor(k·P/N) to floor((k+1)·P/N)-1 of it (P units); at
// epoch e every arc is turned by floor(e·MoveFraction·P/N) units, so that
// from one epoch to the next each node gives up MoveFraction of its units
// (±1) to the next node and takes as many from the one before. A node's
// units are shuffled for the epoch with the epoch stream and dealt to its R
// ranks as a whole epoch's units are dealt; each rank makes its order from
// its own units, and every rank of every node is then padded (or, with
// DropLast, cut) to the same count. With MoveFraction 0 each node reads the
// same pages every epoch, so a cache of a node's share keeps serving it
// after the first epoch. Each global batch then draws on every node's share
// alike: a stratified sample of the dataset, not a biased one. Node-affine
// orders are random or quasi-random; an epoch of one resumes at the same
// world size.
//
// # Resuming at another world size
//
// Options.Resumed lists the parts of the epoch read before a resume, each
// as a Segment: WorldSize ranks that each took the first Position samples
// of their orders (Positions count only the samples Options.Served
// accepts, when set). The order is then the rest of the epoch: the first
// segment's orders are those of a whole epoch at its world size; each
// later segment's are the rest after the segments before it; the samples
// all of them took are left out, and what remains, page by page in the
// epoch's shuffled page order (each page keeping its samples' order), is
// dealt to the WorldSize ranks of the rest exactly as pages are dealt for a
// whole epoch, so pages are not split between ranks. When the rest holds
// fewer pages than ranks, its largest pages are halved until every rank
// gets samples of its own; only a rest of fewer samples than ranks leaves
// some rank to be padded from the rest's first samples. Each rank then
// makes its order from its own pages as for a whole epoch, drawing from
// the resume stream below; counts are equalized by padding or DropLast as
// for a whole epoch. Every rank computes the same rest from the same
// segments, so ranks need not talk to each other; the epoch after is whole
// again. Each segment costs an epoch's worth of generation per rank, and
// there are at most MaxSegments.
//
// # Random streams
//
// Four kinds of PCG-DXSM stream (math/rand/v2's PCG) drive the draws. Each is
// seeded with the first 16 bytes of SHA-256 of a tag followed by
// little-endian uint64 words, read as two little-endian uint64 seeds:
//
//   - the epoch stream, tag "ffcvfs/order/v1/pages\x00", words (Seed, Epoch),
//     shuffles the pages; it is the same for every rank of an epoch;
//   - the rank stream, tag "ffcvfs/order/v1/rank\x00", words (Seed, Epoch,
//     Rank, WorldSize), makes every draw within the rank: the permutation of
//     a random order, the page and sample choices of a quasi-random one;
//   - the nodes stream, tag "ffcvfs/order/v1/nodes\x00", word (Seed), makes
//     the ring of a node-affine order;
//   - the resume stream, tag "ffcvfs/order/v1/resume\x00", words (Seed,
//     Epoch, Rank, WorldSize) followed by (WorldSize, Position) of each
//     segment before, takes the rank stream's place in the rest of a
//     resumed epoch.
//
// A draw below n takes x from the stream and returns the high word of the
// 128-bit product x·n, drawing again while the low word is below 2^64 mod n
// (Lemire's method). A shuffle is Fisher–Yates from the end: for i from
// len-1 down to 1, swap element i with element (draw below i+1). Within a
// quasi-random order, each step draws the open slot, then the position among
// that page's remaining samples; the emitted sample's place is filled by
// the page's last remaining one, and an exhausted page's slot is taken by
// the next page, or, when none is left, by the last slot. The package uses
// no draw of the standard library beyond PCG's raw output, so a change there
// cannot change an order; any change here that changes an order for the same
// inputs is a new version of this definition, and the tags say v1.
//
// # Concurrency
//
// Generate is a pure function of its arguments: it keeps no state, starts no
// goroutine and is safe to call concurrently. It only reads the PageMap, which
// must not change during the call (a *beton.File never does). It costs O(N)
// time and memory in the number of samples N, plus O(P log WorldSize) time
// for the deal of P pages: the result and a bitmap, and for quasi-random a
// scratch copy, about 5 to 9 bytes per sample (BenchmarkGenerate times
// an ImageNet-sized dataset).
//
// # What it must never do
//
// Read sample data or do any I/O: an order is computed from the PageMap
// alone. Depend on map iteration, goroutine scheduling, the clock, the
// platform or the Go release. Split a data page between ranks. Panic on an
// inconsistent PageMap: Generate returns ErrPageMap instead.
package order
