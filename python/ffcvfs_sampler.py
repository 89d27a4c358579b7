"""Sample orders from an ffcvfs mount, as a torch Sampler.

``ffcvfs mount`` serves a .beton as an ImageFolder tree. Its page cache reads
each page of the file from storage about once per epoch when it knows the
order in which samples will be read. :class:`QuasiRandomSampler` takes that
order from the mount itself: it reads
``ROOT/.ffcvfs/orders/quasi-random/SEED/EPOCH`` (or
``.../SEED/RANK-of-WORLD/EPOCH`` for one rank of a distributed job), which
returns ImageFolder indices, one per line, and announces the order to the
cache as a side effect.

Only the standard library and torch are needed.
"""

import errno
import operator
import os

import torch.utils.data

__all__ = ["QuasiRandomSampler", "RandomSampler", "NotAnFfcvfsMountError"]


class NotAnFfcvfsMountError(ValueError):
    """The root given is not an ffcvfs mount (it has no .ffcvfs folder)."""


def _int_arg(name, value, minimum):
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, not a bool ({value!r})")
    try:
        v = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an integer, got {value!r} ({type(value).__name__})") from None
    if v < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {v}")
    return v


class QuasiRandomSampler(torch.utils.data.Sampler):
    # The order kind, a folder of ROOT/.ffcvfs/orders.
    kind = "quasi-random"

    """Quasi-random order of an ffcvfs mount, for ``ImageFolder(root)``.

    The order is random but page-local (like FFCV's QUASI_RANDOM order), so a
    page cache much smaller than the dataset reads each page about once per
    epoch. The mount makes the order; the sampler only reads it, which also
    tells the mount's cache what will be read next. It is a function of the
    dataset, ``seed``, the epoch, ``rank`` and ``world_size`` (and the mount's
    ``--order-batch-size``), so every process and every run sees the same one.

    Example::

        from torch.utils.data import DataLoader
        from torchvision.datasets import ImageFolder
        from ffcvfs_sampler import QuasiRandomSampler

        root = "/mnt/train"  # ffcvfs mount train.beton /mnt/train
        sampler = QuasiRandomSampler(root, seed=0)
        loader = DataLoader(ImageFolder(root, transform=...), batch_size=256,
                            sampler=sampler, num_workers=4)
        for epoch in range(epochs):
            sampler.set_epoch(epoch)
            for images, labels in loader:
                ...

    Call ``set_epoch(e)`` before each epoch, or every epoch repeats epoch 0's
    order. For distributed training give ``rank`` and ``world_size``
    (e.g. ``torch.distributed.get_rank()`` and ``get_world_size()``): each
    rank gets whole pages of its own, and every rank the same number of
    samples. As with torch's ``DistributedSampler``, that number is reached
    by padding: a rank with fewer samples repeats some of its own (at most
    about a page's worth), so with ``world_size > 1`` a few samples may be
    seen twice in an epoch (see the documentation of the Go package
    ``pipeline/order``).

    ``len(sampler)`` is the length of the current epoch's order; the order is
    read once per epoch and kept, so ``len()`` and ``iter()`` agree. Iterating
    the same epoch a second time reads the order again, to announce it to
    the cache again.
    """

    def __init__(self, root, seed=0, rank=0, world_size=1):
        # Sampler.__init__ does nothing, and its signature differs between
        # torch releases, so it is not called.
        try:
            root = os.fspath(root)
        except TypeError:
            raise ValueError(f"root must be a path, got {root!r} ({type(root).__name__})") from None
        if isinstance(root, bytes):
            root = os.fsdecode(root)
        if root == "":
            raise ValueError("root must not be empty")
        self.seed = _int_arg("seed", seed, 0)
        self.world_size = _int_arg("world_size", world_size, 1)
        self.rank = _int_arg("rank", rank, 0)
        if self.rank >= self.world_size:
            raise ValueError(f"rank must be in [0, world_size): rank {self.rank}, world_size {self.world_size}")
        if not os.path.isdir(root):
            raise NotAnFfcvfsMountError(f"{root} is not an ffcvfs mount: it is not a folder")
        if not os.path.isdir(os.path.join(root, ".ffcvfs")):
            raise NotAnFfcvfsMountError(
                f"{root} is not an ffcvfs mount (it has no .ffcvfs folder); "
                f"mount a .beton there first: ffcvfs mount SRC {root}")
        self.root = root
        self.epoch = 0
        self._order = None  # the order of self._order_epoch
        self._order_epoch = None
        self._iterated = False  # whether iter() has used self._order

    def set_epoch(self, epoch):
        """Selects the epoch whose order the next ``iter()`` returns."""
        self.epoch = _int_arg("epoch", epoch, 0)

    def order_path(self, epoch=None):
        """Returns the path of the order file of an epoch (default: the current one)."""
        e = self.epoch if epoch is None else _int_arg("epoch", epoch, 0)
        d = os.path.join(self.root, ".ffcvfs", "orders", self.kind, str(self.seed))
        if self.world_size > 1:
            d = os.path.join(d, f"{self.rank}-of-{self.world_size}")
        return os.path.join(d, str(e))

    def _read(self):
        path = self.order_path()
        try:
            with open(path, "rb") as f:
                text = f.read()
        except OSError as e:
            hint = ""
            if e.errno == errno.EINVAL:
                hint = " (the mount could not make this order, e.g. fewer pages than ranks; its log says why)"
            elif e.errno == errno.ENOTCONN:
                hint = " (the mount's process is gone; unmount with: ffcvfs umount " + self.root + ")"
            raise OSError(e.errno, f"reading the order {path}: {e.strerror}{hint}") from e
        try:
            order = [int(line) for line in text.split()]
        except ValueError:
            raise RuntimeError(f"{path} does not hold one integer per line") from None
        self._order, self._order_epoch, self._iterated = order, self.epoch, False
        return order

    def __len__(self):
        if self._order_epoch != self.epoch:
            self._read()
        return len(self._order)

    def __iter__(self):
        if self._order_epoch != self.epoch or self._iterated:
            self._read()
        self._iterated = True
        return iter(list(self._order))


class RandomSampler(QuasiRandomSampler):
    """Uniformly random order of an ffcvfs mount: a drop-in for ``shuffle=True``.

    Each epoch is a uniform random permutation of the samples, from ``seed``
    and the epoch (call ``set_epoch(e)``), as torch's ``RandomSampler`` or
    ``DistributedSampler(shuffle=True)`` gives, so training sees the same
    statistics. The mount makes the order
    (``ROOT/.ffcvfs/orders/random/SEED/EPOCH``), so its cache knows it and
    fetches ahead exactly the bytes it will read: from slow storage such an
    order runs at the link's speed, where an order the mount does not know
    waits on one request per image.

    With ``world_size > 1``, ranks get disjoint sets of whole pages (about
    equal sample counts), each rank a random permutation of its own
    samples, padded up to the largest rank's count by repeating samples
    from the start of its own order, as ``DistributedSampler`` pads; so
    padded samples appear twice in that rank's epoch. The order within a
    rank is uniform; the split across ranks is by pages.

    Which to use: RandomSampler where the exact statistics of
    ``shuffle=True`` matter; QuasiRandomSampler where the cache is small
    against the dataset and storage bills per byte or per request, since it
    reads each page once per epoch in one request. Both are announced.

    Example::

        sampler = RandomSampler("/mnt/train", seed=0)
        loader = DataLoader(ImageFolder("/mnt/train", transform=...),
                            batch_size=256, sampler=sampler, num_workers=4)
        for epoch in range(epochs):
            sampler.set_epoch(epoch)
            for images, labels in loader:
                ...
    """

    kind = "random"
