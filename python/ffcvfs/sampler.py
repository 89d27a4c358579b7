"""Sample orders from an ffcvfs mount, as torch Samplers that resume mid-epoch.

``ffcvfs mount`` serves a .beton as an ImageFolder tree. Its page cache reads
each page of the file from storage about once per epoch when it knows the
order in which samples will be read. :class:`QuasiRandomSampler` takes that
order from the mount itself: it reads
``ROOT/.ffcvfs/orders/quasi-random/SEED/EPOCH`` (or
``.../SEED/RANK-of-WORLD/EPOCH`` for one rank of a distributed job), which
returns ImageFolder indices, one per line, and announces the order to the
cache as a side effect.

Both samplers resume mid-epoch: ``state_dict()`` and ``load_state_dict()``
follow the convention of torch's stateful samplers (torchdata's
``StatefulDataLoader`` calls them), and after a resume the rest of the epoch
is read exactly once and announced from that position on.

Only the standard library and torch are needed.
"""

import errno
import os
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import torch.utils.data

from ._args import MAX_POSITION, MAX_RESUMED_RANKS, MAX_WORLD_SIZE, int_arg, segments_arg, short

__all__ = ["QuasiRandomSampler", "RandomSampler", "NotAnFfcvfsMountError"]


class NotAnFfcvfsMountError(ValueError):
    """The root given is not an ffcvfs mount (it has no .ffcvfs folder)."""


def _nodes_arg(nodes: Union[int, str, None], rank: int, world_size: int) -> int:
    """The node count of a node-affine order: an int, None (1: no node
    affinity), or "auto": world_size over torchrun's LOCAL_WORLD_SIZE,
    checked against GROUP_RANK (or NODE_RANK) when set."""
    if nodes is None:
        return 1
    if nodes == "auto":
        try:
            local = int(os.environ["LOCAL_WORLD_SIZE"])
        except (KeyError, ValueError):
            raise ValueError("nodes='auto' needs torchrun's LOCAL_WORLD_SIZE in the environment") from None
        if local < 1 or world_size % local:
            raise ValueError(f"LOCAL_WORLD_SIZE {local} does not divide world_size {world_size}")
        for var in ("GROUP_RANK", "NODE_RANK"):
            if var in os.environ and int(os.environ[var]) != rank // local:
                raise ValueError(f"{var}={os.environ[var]}, but rank {rank} with {local} ranks a node is on "
                                 f"node {rank // local}: ranks must be numbered node by node, as torchrun does")
        return world_size // local
    n = _int_arg("nodes", nodes, 1)
    if n > world_size or world_size % n:
        raise ValueError(f"nodes must divide world_size: nodes {n}, world_size {world_size}")
    return n


_int_arg = int_arg


class QuasiRandomSampler(torch.utils.data.Sampler):
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
        from ffcvfs import QuasiRandomSampler

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
    ``order/``).

    ``nodes`` makes the order node-affine for a job on several machines,
    each with its own mount: the pages are split among the nodes once, so
    that every epoch each node reads the same pages (its caches, RAM and
    ``--disk-cache``, keep serving them after the first epoch), shuffled
    anew among its ranks; ``move`` (0 to 1) is the share of each node's
    pages that moves to another node per epoch. Give the node count, or
    ``"auto"`` under torchrun (``world_size // LOCAL_WORLD_SIZE``); ranks are
    numbered node by node, as torchrun numbers them. Each global batch then
    draws on every node's share alike.

    ``len(sampler)`` is the length of the current epoch's order; the order is
    read once per epoch and kept, so ``len()`` and ``iter()`` agree. Iterating
    the same epoch a second time reads the order again, to announce it to
    the cache again.

    Resuming mid-epoch::

        state = sampler.state_dict(consumed=batches_done * batch_size)
        ...                                  # saved with the checkpoint
        sampler.load_state_dict(state)       # in the new process
        for epoch in range(state["epoch"], epochs):
            sampler.set_epoch(epoch)
            for images, labels in loader:    # the rest of the epoch, then whole ones
                ...

    ``state_dict()`` holds the epoch, the position in its order, the seed,
    the rank and the world size, and ``segments``: the parts of the epoch
    read before, as ``[world_size, position]`` pairs. Any rank may load any
    rank's state, at any world size: every rank of a synchronous
    data-parallel job takes the same number of batches, so one position
    stands for all of them. At the same world size and rank the rank goes
    on with its own order; at another world size the rest of the epoch,
    the samples no rank took yet, is dealt anew over the new ranks
    (``orders/KIND/SEED/RANK-of-WORLD/EPOCH.resume-W0xP0[-W1xP1...]``),
    each sample once, pages not split between ranks. The position is ``consumed`` when given:
    the samples the training loop has taken from the DataLoader in this
    epoch. Without it, it is the samples this sampler has handed out, which
    is the same with ``num_workers=0``; with workers a DataLoader draws
    indices ahead of the batches it yields (``prefetch_factor`` ×
    ``num_workers`` batches), so pass ``consumed``. After
    ``load_state_dict()`` the next iteration of that epoch yields the order
    from that position on, and only that rest is announced to the mount;
    ``len()`` is then the length of the rest.
    """

    # The order kind, a folder of ROOT/.ffcvfs/orders.
    kind = "quasi-random"

    def __init__(self, root: Union[str, "os.PathLike[str]"], seed: int = 0, rank: int = 0,
                 world_size: int = 1, nodes: Union[int, str, None] = None, move: float = 0.0) -> None:
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
        self.world_size = _int_arg("world_size", world_size, 1, MAX_WORLD_SIZE)
        self.rank = _int_arg("rank", rank, 0)
        if self.rank >= self.world_size:
            raise ValueError(f"rank must be in [0, world_size): rank {self.rank}, world_size {self.world_size}")
        self.nodes = _nodes_arg(nodes, self.rank, self.world_size)
        try:
            self.move = float(move)
        except (TypeError, ValueError):
            raise ValueError(f"move must be a number from 0 to 1, got {move!r}") from None
        if not 0.0 <= self.move <= 1.0:
            raise ValueError(f"move must be from 0 to 1, got {self.move}")
        if not os.path.isdir(root):
            raise NotAnFfcvfsMountError(f"{root} is not an ffcvfs mount: it is not a folder")
        if not os.path.isdir(os.path.join(root, ".ffcvfs")):
            raise NotAnFfcvfsMountError(
                f"{root} is not an ffcvfs mount (it has no .ffcvfs folder); "
                f"mount a .beton there first: ffcvfs mount SRC {root}")
        self.root = root
        self.epoch = 0
        self._order: Optional[List[int]] = None  # the order read last: of _order_epoch, _order_segs, from _order_start
        self._order_epoch: Optional[int] = None
        self._order_start = 0
        self._order_segs: List[Tuple[int, int]] = []
        self._iterated = False  # whether iter() has used self._order
        self._resume = 0  # position the next iteration of self.epoch starts at (load_state_dict)
        self._resume_segs: List[Tuple[int, int]] = []  # the earlier parts it follows (load_state_dict)
        self._segs: List[Tuple[int, int]] = []  # the earlier parts of the part being iterated
        self._base = 0  # position the current epoch's iteration started at
        self._yielded = 0  # position it has reached

    def set_epoch(self, epoch: int) -> None:
        """Selects the epoch whose order the next ``iter()`` returns. An epoch
        other than the one ``load_state_dict()`` resumed starts from its
        beginning."""
        epoch = _int_arg("epoch", epoch, 0)
        if epoch != self.epoch:
            self._resume = self._base = self._yielded = 0
            self._resume_segs, self._segs = [], []
        self.epoch = epoch

    def order_path(self, epoch: Optional[int] = None, start: int = 0,
                   segments: Sequence[Tuple[int, int]] = ()) -> str:
        """Returns the path of the order file of an epoch (default: the
        current one); from position ``start`` on when it is not 0; the rest
        after ``segments`` (``(world_size, position)`` pairs) when given."""
        e = self.epoch if epoch is None else _int_arg("epoch", epoch, 0)
        d = os.path.join(self.root, ".ffcvfs", "orders", self.kind, str(self.seed))
        if self.world_size > 1:
            shard = f"{self.rank}-of-{self.world_size}"
            if self.nodes > 1:
                shard += f".nodes-{self.nodes}"
                if self.move:
                    shard += ".move-" + (f"{self.move:.6f}".rstrip("0").rstrip(".") or "0")
            d = os.path.join(d, shard)
        name = str(e)
        if segments:
            name += ".resume-" + "-".join(f"{w}x{p}" for w, p in segments)
            if start:
                raise ValueError("an order file is the rest after segments, or from a position, not both")
        elif start:
            name += f".from-{_int_arg('start', start, 0)}"
        return os.path.join(d, name)

    def state_dict(self, consumed: Optional[int] = None) -> Dict[str, Any]:
        """The state to resume from: kind, seed, epoch, position, rank,
        world_size and segments. ``consumed``: the samples of this epoch the
        training loop has taken (default: those this sampler handed out; see
        the class's documentation for DataLoaders with workers)."""
        pos = self._yielded if consumed is None else self._base + _int_arg("consumed", consumed, 0)
        return {"kind": self.kind, "seed": self.seed, "epoch": self.epoch, "position": pos,
                "rank": self.rank, "world_size": self.world_size,
                "segments": [[w, p] for w, p in self._segs], "nodes": self.nodes, "move": self.move}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Resumes from ``state_dict()`` of any rank, at any world size: the
        next iteration of its epoch yields this rank's share of the rest of
        the epoch. The kind must be this sampler's."""
        try:
            kind, seed, epoch, pos = state_dict["kind"], state_dict["seed"], state_dict["epoch"], state_dict["position"]
            rank, world = state_dict["rank"], state_dict["world_size"]
            segs = state_dict.get("segments", [])
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"not a sampler state (want kind, seed, epoch, position, rank, world_size): {short(state_dict)}") from e
        if kind != self.kind:
            raise ValueError(f"the state is of a {short(kind)} sampler, this one is {self.kind}")
        segs = segments_arg(segs)
        rank, world = _int_arg("rank", rank, 0), _int_arg("world_size", world, 1, MAX_WORLD_SIZE)
        if rank >= world:
            raise ValueError(f"the state's rank {rank} is not below its world size {world}")
        if sum(w for w, _ in segs) + world > MAX_RESUMED_RANKS:
            raise ValueError(f"the state's parts have more than {MAX_RESUMED_RANKS} ranks in all")
        pos = _int_arg("position", pos, 0, MAX_POSITION)
        seed, epoch = _int_arg("seed", seed, 0), _int_arg("epoch", epoch, 0)
        nodes = _int_arg("nodes", state_dict.get("nodes", 1) or 1, 1, world)
        # Nothing changes until every number has been checked.
        self.seed, self.epoch = seed, epoch
        if not segs and (rank, world) == (self.rank, self.world_size):
            # The same rank goes on with its own order.
            self._resume, self._resume_segs = pos, []
        elif nodes > 1 or self.nodes > 1:
            raise ValueError(f"a node-affine epoch resumes at the same rank and world size (the state is rank {rank} "
                             f"of {world}, this sampler rank {self.rank} of {self.world_size}); start the next epoch instead")
        else:
            # The rest after every part so far, dealt over this job's ranks.
            self._resume, self._resume_segs = 0, segs + [(world, pos)]
        # Until the next iteration, state_dict() gives back where it starts.
        self._base = self._yielded = self._resume
        self._segs = list(self._resume_segs)
        self._order, self._order_epoch, self._iterated = None, None, False

    def _read(self, start: int, segs: List[Tuple[int, int]]) -> List[int]:
        path = self.order_path(start=start, segments=segs)
        try:
            with open(path, "rb") as f:
                text = f.read()
        except OSError as e:
            hint = ""
            if e.errno == errno.EINVAL:
                hint = (" (the mount could not make this order, e.g. fewer pages than ranks, or a resumed"
                        " position beyond the epoch's end; its log says why)")
            elif e.errno == errno.ENOTCONN:
                hint = " (the mount's process is gone; unmount with: ffcvfs umount " + self.root + ")"
            raise OSError(e.errno, f"reading the order {path}: {e.strerror}{hint}") from e
        try:
            order = [int(line) for line in text.split()]
        except ValueError:
            raise RuntimeError(f"{path} does not hold one integer per line") from None
        self._order, self._order_epoch, self._order_start, self._order_segs = order, self.epoch, start, list(segs)
        self._iterated = False
        return order

    def _stale(self) -> bool:
        return (self._order_epoch != self.epoch or self._order_start != self._resume
                or self._order_segs != self._resume_segs)

    def __len__(self) -> int:
        if self._order is None or self._order_epoch != self.epoch or (not self._iterated and self._stale()):
            self._read(self._resume, self._resume_segs)
        return len(self._order)

    def __iter__(self) -> Iterator[int]:
        if self._stale() or self._iterated:
            self._read(self._resume, self._resume_segs)
        self._iterated = True
        # A resumed epoch resumes once: iterating it again reads it whole.
        self._segs, self._resume, self._resume_segs = self._order_segs, 0, []
        self._base = self._yielded = self._order_start
        return self._iterate(list(self._order))

    def _iterate(self, order: List[int]) -> Iterator[int]:
        for i in order:
            self._yielded += 1
            yield i


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
