package tier

// EncodePage encodes page dp as a tier would store it (compressed when it
// pays), and returns the entry. For benchmarks.
func EncodePage(page []byte, dp int32, layout []Chunk) ([]byte, error) {
	return encodeEntry(nil, page, uint32(dp), 0, layout, true)
}

// DecodePage decodes an entry of EncodePage into page. For benchmarks.
func DecodePage(page, entry []byte, dp int32) error {
	ix, err := parseIndex(entry, uint32(dp), uint32(len(page)), 0, int64(len(entry)))
	if err != nil {
		return err
	}
	return ix.decodeSpan(page, 0, 0, len(ix.chunks)-1, entry[ix.chunks[0].storedOff:])
}
