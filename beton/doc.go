// Package beton reads and writes the .beton dataset format (version 2), byte
// for byte as the reference Python implementation does.
//
// # What it owns
//
// The file layout: header, field descriptors, the C-aligned metadata table,
// whole data pages, and the allocation table. Open reads the four fixed
// sections once each from any io.ReaderAt and checks every rule that needs no
// sample data; it then answers, from memory, the value of every scalar field,
// the location (pointer and size) of every variable-size value, the page of
// every sample and the samples of every page. Verify checks the rest,
// reading each data page once. Writer lays out a new file.
//
// # Concurrency
//
// A File is immutable after Open and safe for concurrent use; its reads go
// straight to the io.ReaderAt, which must itself allow concurrent ReadAt (as
// *os.File does). A Writer belongs to one goroutine.
//
// # What it must never do
//
// Panic, or allocate more memory than the file's size justifies, on a corrupt
// file: every error names the file, the sample or field, and the cause, and
// wraps ErrCorrupt, ErrVersion, ErrNotBeton or ErrUnsupported. It keeps no cache and has
// no I/O policy: callers (pagecache, fs) decide how bytes are fetched.
package beton
