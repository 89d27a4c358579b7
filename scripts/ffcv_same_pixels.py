#!/usr/bin/python3
"""Check for `scripts/bench.sh feed`: FFCV 1.0 reads two betons of the same
images, one of them written with `ffcvfs write --restart-interval`, and
decodes every image of both to the same pixels (its center-crop decoder,
sequential order, whole batches).

    /usr/bin/python3 scripts/ffcv_same_pixels.py A.beton B.beton --ffcv DIR

DIR holds FFCV's source with its extension built in place. Prints
`N images, M identical center crops` and exits 1 unless M = N > 0.
"""

import argparse
import sys


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--ffcv", required=True, help="FFCV source folder with the extension built in place")
    a = p.parse_args()
    sys.path.insert(0, a.ffcv)
    import numpy as np
    from ffcv.fields.decoders import CenterCropRGBImageDecoder, IntDecoder
    from ffcv.loader import Loader, OrderOption

    def batches(path):
        loader = Loader(path, batch_size=256, num_workers=2, order=OrderOption.SEQUENTIAL,
                        pipelines={"image": [CenterCropRGBImageDecoder((160, 160), 224 / 256)], "label": [IntDecoder()]})
        for images, _ in loader:
            yield np.array(images)

    n = same = 0
    for x, y in zip(batches(a.a), batches(a.b)):
        n += len(x)
        same += sum(int(np.array_equal(u, v)) for u, v in zip(x, y))
    print(f"{n} images, {same} identical center crops")
    sys.exit(0 if n > 0 and same == n else 1)


if __name__ == "__main__":
    main()
