"""Makes the data of `scripts/bench.sh cifar`: an ImageFolder of N 32x32
images (10 classes, PPM) cut from real photos, as CIFAR-10's are.

    /usr/bin/python3 scripts/make_cifar_data.py PHOTO_FOLDER OUT N

Image i is a random square crop (area 30-100 % of the largest square of
the photo) of photo i mod P of PHOTO_FOLDER's JPEGs (sorted), shrunk to
32x32 with PIL's box filter, in class i mod 10. Seeded: the same photos
and N make the same files.
"""
import glob
import os
import random
import sys

from PIL import Image


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    photos = sorted(glob.glob(os.path.join(sys.argv[1], "*", "*.jpg")))
    out, n = sys.argv[2], int(sys.argv[3])
    if not photos or n < 10:
        sys.exit(f"{sys.argv[1]}: no JPEGs, or N below 10")
    for c in range(10):
        os.makedirs(os.path.join(out, f"class{c}"), exist_ok=True)
    per = (n + len(photos) - 1) // len(photos)
    i = 0
    for p, path in enumerate(photos):
        if i >= n:
            break
        img = Image.open(path).convert("RGB")
        w, h = img.size
        for k in range(per):
            if i >= n:
                break
            r = random.Random(i)
            side = int(min(w, h) * r.uniform(0.3, 1.0) ** 0.5)
            x, y = r.randrange(w - side + 1), r.randrange(h - side + 1)
            small = img.crop((x, y, x + side, y + side)).resize((32, 32), Image.BOX)
            small.save(os.path.join(out, f"class{i % 10}", f"img{i:06d}.ppm"))
            i += 1
    print(f"{i} images of 32x32 in {out}")


if __name__ == "__main__":
    main()
