// Package stream writes a beton from samples that another program sends,
// framed, over pipes or files: the samples of any dataset, with fields of
// every type (ints, floats, RGB images given as files or as pixels, bytes,
// JSON, arrays), so that a writer in any language only fetches samples
// and leaves decoding, resizing, encoding and packing pages to this
// package, on all cores. `ffcvfs write --from-stream` runs it; the Python
// package's DatasetWriter is one producer.
//
// The format is its own, written by hand, because a producer in any
// language writes it in a few lines without a library (a length word, a
// kind byte, fixed little-endian numbers, JSON once), and an image's bytes
// cross it as they are; a general encoding (protobuf, msgpack) would need
// a library on each side and copy every image once more.
//
// # The format (version 1)
//
// A stream is a sequence of frames. Numbers are little-endian. Every
// frame is
//
//	u32 size   the bytes that follow in this frame, 1 ≤ size ≤ Options.MaxFrame
//	u8  kind   'H', 'S' or 'E'
//	...        size-1 bytes of body
//
// The first frame of a stream, and only it, is the header ('H'): UTF-8
// JSON (at most 1 MiB), as Header describes:
//
//	{"format": "ffcvfs-stream", "version": 1, "samples": 3,
//	 "page_size": 8388608, "seed": 0,
//	 "fields": [{"name": "image", "type": "rgb_image", "write_mode": "jpg",
//	             "max_resolution": 256, "jpeg_quality": 90},
//	            {"name": "label", "type": "int"},
//	            {"name": "boxes", "type": "ndarray", "dtype": "<f4", "shape": [4, 4]}]}
//
// Field types: int, float, rgb_image, bytes, json, ndarray, torch_tensor
// (FFCV's seven). An rgb_image field takes FFCV's RGBImageField arguments
// (write_mode raw, jpg, smart or proportion; max_resolution;
// smart_threshold, where absent means never a JPEG in smart mode, as in
// FFCV; jpeg_quality; compress_probability) and restart_interval (the
// MCUs between the restart markers every JPEG stored gets, losslessly;
// absent: 4, 0: none, the JPEGs as they are); ndarray and torch_tensor
// take a NumPy type string and a shape.
//
// A sample ('S'): u64 id, then one value per field, in field order:
//
//	int                                    i64
//	float                                  f64
//	bytes, json, ndarray, torch_tensor     u32 n, n bytes
//	rgb_image                              u8 form, u32 width, u32 height, u32 n, n bytes
//
// JSON values are the text without a trailing NUL (the beton adds it);
// arrays are their bytes in C order as their type string says. An image
// of form 0 is an image file (JPEG, PNG, ...; width and height are
// ignored): a JPEG that fits the field is kept without decoding (byte for
// byte with restart_interval 0), as `ffcvfs write` keeps them; form 1 is width×height RGB pixels, row by row.
//
// An error the producer met ('E'): u64 id, u16 field index (0xFFFF: none),
// UTF-8 message. The write stops with it, naming the sample and field.
//
// The samples' ids run from 0 to samples-1. One stream carries them in
// order; several streams (one per producer process) each carry theirs in
// increasing order, and together each id once: the writer merges them by
// id, so that the beton is the same bytes for any number of streams. A
// stream ends at a frame's end (EOF) after its last sample. Every stream
// starts with the same header.
//
// # Memory
//
// What a write holds is bounded by the workers and the page size, never
// by the dataset's size, nor by how well its images compress (a PNG of
// 4000×4000 pixels may be 50 KB on the stream and 48 MB decoded):
//
//   - per stream: a 1 MiB read buffer and at most three batches of parsed
//     frames (a batch: 64 samples or 1 MiB of frames, or one larger
//     frame). A frame of up to 1 MiB is read into a buffer of its size; a
//     larger one as its bytes arrive, so that a size word alone
//     allocates little.
//   - handed to the workers and not yet written: at most 2×Workers jobs,
//     and of them at most Options.MaxHeld bytes (64 MiB per worker by
//     default), or one job when it alone is more. A sample counts its
//     frame and, for each image that may be stored as pixels or encoded
//     anew, its pixels once prepared (w×h×3, resized to max_resolution),
//     read from the frame or the file's header before anything is
//     decoded. A job holds 1 MiB of such bytes, or one sample.
//   - per worker: the image it prepares, decoded (up to about 3×w×h×3
//     bytes while a PNG or TIFF is converted to RGB).
//   - the page being filled (the page size) and 1 MiB of output buffer;
//     an s3:// destination adds its parts (storage.S3Upload).
//
// The metadata and allocation tables grow with the samples written (45
// bytes a sample of an image and a label), whatever count the header
// claims.
package stream
