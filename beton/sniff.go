package beton

import (
	"net/http"
	"strings"
)

// sniffKind names the kind of file whose header is h, when it is that of a
// common format other than a beton (an image, an archive, text), so that a
// wrong file is called what it is rather than a beton of an odd version;
// "" otherwise. The kinds come from net/http's content sniffing (the WHATWG
// algorithm). Only files whose version field is implausible (above 255)
// are sniffed: a damaged beton is reported as one, whatever its bytes.
func sniffKind(h []byte) string {
	if len(h) < 2 || uint16(h[0])|uint16(h[1])<<8 <= 0xFF {
		return ""
	}
	t, _, _ := strings.Cut(http.DetectContentType(h), ";")
	return sniffedKinds[t]
}

// sniffedKinds are the content types sniffKind names.
var sniffedKinds = map[string]string{
	"image/jpeg":         "a JPEG image",
	"image/png":          "a PNG image",
	"image/gif":          "a GIF image",
	"image/webp":         "a WebP image",
	"image/bmp":          "a BMP image",
	"application/x-gzip": "a gzip file",
	"application/zip":    "a zip archive",
	"application/pdf":    "a PDF document",
	"text/plain":         "a text file",
	"text/html":          "an HTML page",
	"text/xml":           "an XML document",
}
