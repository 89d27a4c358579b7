package jpeg_test

import (
	"bytes"
	"fmt"
	"log"
	"os"

	"github.com/ffcvfs/ffcvfs/jpeg"
)

// A 128×128 crop of a photo, decoded at half scale (m = 4 of 8): only the
// DCT blocks that cover it are decoded, into 64×64 pixels of packed RGB.
func ExampleDecoder_DecodeRegion() {
	src, err := os.ReadFile("../testdata/imagefolder-small/class000/img00000.jpg")
	if err != nil {
		log.Fatal(err)
	}
	d, err := jpeg.NewDecoder()
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	w, h, err := d.Header(src)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("the photo: %dx%d\n", w, h)

	const x, y, side, m = 96, 64, 128, 4
	dst := make([]byte, (side*m/8)*(side*m/8)*3)
	cw, ch, err := d.DecodeRegion(src, x, y, side, side, m, dst, side*m/8*3)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("the crop at %d/8: %dx%d, %d bytes\n", m, cw, ch, cw*ch*3)

	// ScaledWindow says where a crop lies at scale m/8 (here exactly, as
	// the crop's edges are multiples of 8/m).
	win := jpeg.ScaledWindow(x, y, side, side, w, h, m)
	fmt.Printf("at %d,%d of the scaled image\n", win.X0, win.Y0)

	// The same pixels as the whole photo decoded at 4/8, then cropped.
	sw, sh := (w*m+7)/8, (h*m+7)/8
	whole := make([]byte, sw*sh*3)
	if _, _, err := d.DecodeRegion(src, 0, 0, w, h, m, whole, sw*3); err != nil {
		log.Fatal(err)
	}
	same := true
	for r := range ch {
		row := whole[((win.Y0+r)*sw+win.X0)*3:][:cw*3]
		same = same && bytes.Equal(row, dst[r*cw*3:][:cw*3])
	}
	fmt.Println("same pixels as the whole image's:", same)
	// Output:
	// the photo: 553x445
	// the crop at 4/8: 64x64, 12288 bytes
	// at 48,32 of the scaled image
	// same pixels as the whole image's: true
}
