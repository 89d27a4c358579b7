"""Times one training loop fed five ways, for scripts/device-check.sh.

The question a training node asks of a data loader is whether the GPU waits.
This script trains a model for a fixed number of steps (after warm-up) fed by

  gpu-resident       batches already on the device, drawn once: the ceiling,
                     what the model trains at when data costs nothing;
  ffcvfeed-cuda      ffcvfeed serve --device cuda:0 (a build with -tags cuda),
                     the Loader's CUDA tensors (DLPack, no copy);
  ffcvfeed-cpu       ffcvfeed serve's shared-memory batches, pinned, copied
                     with .cuda(non_blocking=True) (on a CPU run: used as
                     they are);
  dataloader-mount   torch's DataLoader over torchvision's ImageFolder on an
                     ffcvfs mount, the unchanged recipe of docs/training.md
                     (RandomResizedCrop, flip, PILToTensor), as many
                     workers as cores;
  dataloader-folder  the same over a plain folder of the same files;

and prints, per model and feed, a line to grep:

    train model=M feed=F images/s=X of_ceiling=P

Every feed gives uint8 images; the loop normalizes them on the device,
in channels_last, under bf16 autocast on a GPU, with SGD. A feed that
cannot run here (no GPU, no CUDA build, no torchvision or PIL) prints
`train model=M feed=F: left out, REASON` and the rest run.

Usage:

    python3 python/train_check.py --ffcvfeed bin/ffcvfeed [--ffcvfeed-cuda bin/ffcvfeed-cuda] \\
        --data plain.beton [--mount MNT] [--folder DIR] [--cpu-only]

--cpu-only trains a tiny model on the CPU for a few steps: the check that
the loops run, for CI; its figures say nothing of a GPU node.
"""

import argparse
import itertools
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from torch import nn  # noqa: E402

from check_ffcvfeed_cuda import Server  # noqa: E402
from ffcvfs import Loader  # noqa: E402

MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]


# --- models ---

class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin, width, stride):
        super().__init__()
        cout = width * self.expansion
        self.body = nn.Sequential(
            nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
            nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
            nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.skip = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                     if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x):
        return torch.relu(self.body(x) + self.skip(x))


class Basic(nn.Module):
    expansion = 1

    def __init__(self, cin, width, stride):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(cin, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
            nn.Conv2d(width, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width))
        self.skip = (nn.Sequential(nn.Conv2d(cin, width, 1, stride, bias=False), nn.BatchNorm2d(width))
                     if stride != 1 or cin != width else nn.Identity())

    def forward(self, x):
        return torch.relu(self.body(x) + self.skip(x))


def resnet(block, layers, classes):
    """The ResNet of He et al. as torchvision builds it (v1.5: the stride
    in the 3x3 convolution), for a node without torchvision."""
    mods = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for i, n in enumerate(layers):
        width = 64 << i
        for j in range(n):
            mods.append(block(cin, width, 2 if j == 0 and i > 0 else 1))
            cin = width * block.expansion
    mods += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*mods)


def tiny(classes):
    """A few convolutions: enough to run every step of the loop on a CPU."""
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
        nn.Conv2d(16, 32, 3, 2, 1), nn.BatchNorm2d(32), nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, classes))


def make_model(name, classes):
    """The model and where it came from (torchvision's, else this file's)."""
    if name == "tiny":
        return tiny(classes), "this file"
    try:
        import torchvision.models as tvm
        return getattr(tvm, name)(num_classes=classes), "torchvision"
    except ImportError:
        layers = {"resnet18": (Basic, [2, 2, 2, 2]), "resnet50": (Bottleneck, [3, 4, 6, 3])}
        if name not in layers:
            raise SystemExit(f"model {name}: no torchvision here, and this file builds only resnet18 and resnet50")
        block, n = layers[name]
        return resnet(block, n, classes), "this file (no torchvision)"


# --- the loop ---

class Trainer:
    def __init__(self, model, device, classes):
        self.device = device
        self.gpu = device.type == "cuda"
        self.model = model.to(device, memory_format=torch.channels_last)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-5)
        self.loss = nn.CrossEntropyLoss()
        self.classes = classes
        self.mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1)
        self.std = torch.tensor(STD, device=device).view(1, 3, 1, 1)

    def step(self, images, labels):
        """One SGD step on a uint8 NCHW batch (any memory format), on any device."""
        x = images.to(self.device, non_blocking=True).float().sub_(self.mean).div_(self.std)
        x = x.contiguous(memory_format=torch.channels_last)
        y = labels.to(self.device, non_blocking=True).long().view(-1) % self.classes
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.gpu):
            loss = self.loss(self.model(x), y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return labels.shape[0]

    def sync(self):
        if self.gpu:
            torch.cuda.synchronize(self.device)

    def time(self, batches, warmup, steps):
        """images/s over `steps` steps after `warmup`; batches yields (images, labels)."""
        it = iter(batches)
        for images, labels in itertools.islice(it, warmup):
            self.step(images, labels)
        self.sync()
        n, t = 0, time.perf_counter()
        done = 0
        for images, labels in itertools.islice(it, steps):
            n += self.step(images, labels)
            done += 1
        self.sync()
        elapsed = time.perf_counter() - t
        if done < steps:
            raise RuntimeError(f"the feed ended after {done} of {steps} timed steps")
        return n / elapsed


# --- feeds ---

def resident(opts, device):
    """The same few batches on the device over and over: data costs nothing."""
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randint(0, 256, (opts.batch_size, 3, opts.resolution, opts.resolution), dtype=torch.uint8,
                              generator=g).to(device).contiguous(memory_format=torch.channels_last),
                torch.randint(0, 1000, (opts.batch_size,), generator=g).to(device)) for _ in range(4)]
    return itertools.cycle(batches)


def ffcvfeed(opts, binary, device_flag, tmp, epochs, pin):
    """Batches from ffcvfeed serve: CUDA tensors with device_flag cuda:0,
    else the shared-memory batches (pinned and copied by .torch("cuda")
    with pin)."""
    args = ["--batch-size", str(opts.batch_size), "--resolution", str(opts.resolution), "--epochs", str(epochs),
            "--order", "quasi-random", "--seed", "1"]
    srv = Server(binary, opts.data, device_flag, args, tmp)
    try:
        if device_flag != "cpu":
            with Loader(srv.sock) as loader:
                for _ in range(epochs):
                    yield from loader.torch(channels_last=True)
        else:
            with Loader(srv.sock, pin=pin) as loader:
                for _ in range(epochs):
                    yield from loader.torch(device="cuda" if pin else None, channels_last=True)
    finally:
        srv.proc.kill()
        srv.proc.wait()


def dataloader(opts, root, cycles):
    import torchvision.transforms as T
    from torchvision.datasets import ImageFolder
    dataset = ImageFolder(root, transform=T.Compose([T.RandomResizedCrop(opts.resolution), T.RandomHorizontalFlip(),
                                                      T.PILToTensor()]))
    loader = torch.utils.data.DataLoader(dataset, batch_size=opts.batch_size, shuffle=True, num_workers=opts.workers,
                                         pin_memory=torch.cuda.is_available(), drop_last=True,
                                         persistent_workers=opts.workers > 0)
    for _ in range(cycles):
        yield from loader


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ffcvfeed", required=True, help="ffcvfeed (the CPU build)")
    ap.add_argument("--ffcvfeed-cuda", help="ffcvfeed built with -tags cuda (feed ffcvfeed-cuda)")
    ap.add_argument("--data", required=True, help="the beton")
    ap.add_argument("--mount", help="an ffcvfs mount of the beton (feed dataloader-mount)")
    ap.add_argument("--folder", help="a folder of the same files (feed dataloader-folder)")
    ap.add_argument("--cpu-only", action="store_true", help="a tiny model on the CPU, a few steps")
    ap.add_argument("--models", help="default resnet50,resnet18 (tiny with --cpu-only)")
    ap.add_argument("--batch-size", type=int, help="default 256 (16 with --cpu-only)")
    ap.add_argument("--resolution", type=int, help="default 160 (64 with --cpu-only)")
    ap.add_argument("--steps", type=int, help="timed steps, default 200 (4 with --cpu-only)")
    ap.add_argument("--warmup", type=int, help="steps before timing, default 30 (2 with --cpu-only)")
    ap.add_argument("--workers", type=int, default=os.cpu_count(), help="DataLoader's workers (default: cores)")
    ap.add_argument("--classes", type=int, default=1000)
    opts = ap.parse_args()
    small = opts.cpu_only
    opts.models = opts.models or ("tiny" if small else "resnet50,resnet18")
    opts.batch_size = opts.batch_size or (16 if small else 256)
    opts.resolution = opts.resolution or (64 if small else 160)
    opts.steps = opts.steps or (4 if small else 200)
    opts.warmup = opts.warmup if opts.warmup is not None else (2 if small else 30)
    for name in ("batch_size", "resolution", "steps", "workers", "classes"):
        if not 0 < getattr(opts, name) <= 1_000_000:
            ap.error(f"--{name.replace('_', '-')} {getattr(opts, name)}: want 1 to 1000000")

    gpu = not opts.cpu_only and torch.cuda.is_available()
    if not opts.cpu_only and not gpu:
        print("train: left out, torch sees no GPU (--cpu-only runs the loop on the CPU)", flush=True)
        return 1
    device = torch.device("cuda", 0) if gpu else torch.device("cpu")
    if gpu:
        torch.backends.cudnn.benchmark = True
    where = torch.cuda.get_device_name(0) if gpu else "cpu"
    print(f"train: torch {torch.__version__} on {where}; batch {opts.batch_size} at {opts.resolution} px, "
          f"{opts.warmup} + {opts.steps} steps" + (", bf16 autocast" if gpu else ""), flush=True)

    from check_ffcvfeed_cuda import beton_labels
    samples = len(beton_labels(opts.data))
    need = (opts.warmup + opts.steps + 1) * opts.batch_size
    epochs = need // samples + 2
    missing = None
    try:
        import torchvision  # noqa: F401
        import PIL  # noqa: F401
    except ImportError as e:
        missing = f"no {e.name} here"

    feeds = [
        ("gpu-resident" if gpu else "cpu-resident", lambda tmp: resident(opts, device), None),
        ("ffcvfeed-cuda", lambda tmp: ffcvfeed(opts, opts.ffcvfeed_cuda, "cuda:0", tmp, epochs, False),
         None if gpu and opts.ffcvfeed_cuda else ("no GPU" if not gpu else "no --ffcvfeed-cuda")),
        ("ffcvfeed-cpu", lambda tmp: ffcvfeed(opts, opts.ffcvfeed, "cpu", tmp, epochs, gpu), None),
        ("dataloader-mount", lambda tmp: dataloader(opts, opts.mount, need // samples + 2),
         missing or (None if opts.mount else "no --mount")),
        ("dataloader-folder", lambda tmp: dataloader(opts, opts.folder, need // samples + 2),
         missing or (None if opts.folder else "no --folder")),
    ]
    failed = 0
    with tempfile.TemporaryDirectory(prefix="ffcvfs-train-") as tmp:
        for name in opts.models.split(","):
            model, origin = make_model(name, opts.classes)
            print(f"train: {name} from {origin}", flush=True)
            trainer = Trainer(model, device, opts.classes)
            ceiling = None
            for feed, make, left_out in feeds:
                if left_out:
                    print(f"train model={name} feed={feed}: left out, {left_out}", flush=True)
                    continue
                batches = make(tmp)
                try:
                    rate = trainer.time(batches, opts.warmup, opts.steps)
                except Exception as e:  # one feed's failure is its line; the others run
                    print(f"train model={name} feed={feed}: FAILED, {type(e).__name__}: {e}", flush=True)
                    failed += 1
                    continue
                finally:
                    close = getattr(batches, "close", None)
                    if close:
                        close()
                ceiling = ceiling or rate
                print(f"train model={name} feed={feed} images/s={rate:.0f} of_ceiling={rate / ceiling:.3f}", flush=True)
            del trainer, model
            if gpu:
                torch.cuda.empty_cache()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
