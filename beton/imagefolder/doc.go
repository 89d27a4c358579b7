// Package imagefolder turns a torchvision-style ImageFolder tree into the
// samples and image payloads that an RGB image field of a .beton file stores.
//
// # What it owns
//
// Scan lists a tree exactly as torchvision's DatasetFolder does (classes, their
// indices, and the order of samples). Prepare turns one image file into what
// the reference writer would store for it: the pixels PIL's convert("RGB")
// gives, shrunk with OpenCV's INTER_AREA rule when they exceed a maximum
// resolution, then kept as raw RGB bytes or as a JPEG (either the source file
// itself, unchanged, or a new encoding made with libjpeg-turbo). Formats are
// recognised by their content, not their file name: JPEG, PNG, BMP, TIFF,
// WebP and the PNM family (PBM, PGM, PPM).
//
// It knows nothing of the .beton layout; a writer takes Prepared values and
// stores them.
//
// # Concurrency
//
// Scan and Prepare keep no global state. Prepare is safe for concurrent use as
// long as each goroutine passes its own Scratch (or nil) and its own
// *rand.Rand; a Scratch is meant to live as long as one worker and be reused
// for every image it converts.
//
// # What it must never do
//
// Panic on bad input. A corrupt, truncated or unsupported file gives an error
// that names the file and the cause; so does an image whose header claims
// more pixels than PIL would agree to open.
package imagefolder
