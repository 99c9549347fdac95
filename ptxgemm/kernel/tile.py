"""The tile choice: what the selection picks, the tune cache stores and a short tag names (schedule, block sizes,
stages, cluster, rasterization, split-K or the stream-K tail, and whether the store is transposed for swap-AB). The operands' dtypes
and layouts, the fused epilogue and the build switches are not part of it: the problem and the caller decide those
(GemmConfig holds all four groups; `GemmConfig.tile` is this part of it).
"""
from __future__ import annotations

import dataclasses
import re

from ..errors import ConfigError

TAG_SCHEDULE = {"pingpong": "pp", "cooperative": "coop"}
RASTER_TAGS = {"m": "m", "n": "n", "hilbert": "h"}
_TAG = re.compile(r"(pp|coop)(\d+)x(\d+)(t)?(?:c(\d+))?(?:cn(\d+))?(?:g(\d+))?(?:r([mnh]))?(?:k(\d+))?(sk)?(z)?"
                  r"(?:s(\d+))?")


@dataclasses.dataclass(frozen=True)
class Tile:
    """A tile choice. Its defaults are GemmConfig's; GemmConfig validates the combination with the operands."""

    schedule: str = "pingpong"    # how the two consumer warpgroups share the tiles (config.SCHEDULES)
    block_m: int = 128
    block_n: int = 128
    stages: int | None = None     # None: as many as fit in shared memory
    cluster_m: int = 1
    cluster_n: int = 1
    group_m: int = 8
    raster: str = "m"
    splits: int = 1
    c_major: str = "n"            # "m": tiles stored transposed (swap-AB)
    stream_k: bool = False        # the last partial wave's k-tiles spread over every cluster (streamk.ptx.j2)
    k_serpentine: bool = False    # odd passes of the walk run their k-loops backward (scheduler.ptx.j2)

    @classmethod
    def of(cls, config) -> Tile:
        """The tile part of a GemmConfig (or of anything with these fields)."""
        return cls(**{f.name: getattr(config, f.name) for f in dataclasses.fields(cls)})

    def fields(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def tag(self) -> str:
        """The tile choice in a few characters: 'pp128x128', 'coop256x128c2' (cluster_m 2), 'coop128x256cn2'
        (cluster_n 2), 'pp128x192g16rns5' (group 16, raster n, 5 stages), 'pp64x128k4' (split-K 4),
        'coop128x256c2sk' (stream-K tail), 'coop128x256c2skz' (and the serpentine k-loop), 'pp128x16t' (transposed
        store: swap-AB)."""
        return self._tag(with_walk=True)

    @property
    def tile_tag(self) -> str:
        """The tag without the split count, the stream-K tail or the serpentine k-loop: what the cost model's per-tile
        tables are keyed by."""
        return self._tag(with_walk=False)

    def _tag(self, with_walk: bool) -> str:
        """`with_walk`: also how the walk cuts and orders the k-loops (split-K, the stream-K tail, the serpentine)."""
        t = f"{TAG_SCHEDULE[self.schedule]}{self.block_m}x{self.block_n}"
        if self.c_major == "m":
            t += "t"
        if self.cluster_m > 1:
            t += f"c{self.cluster_m}"
        if self.cluster_n > 1:
            t += f"cn{self.cluster_n}"
        if self.group_m != Tile.group_m:
            t += f"g{self.group_m}"
        if self.raster != Tile.raster:
            t += f"r{RASTER_TAGS[self.raster]}"
        if self.splits > 1 and with_walk:
            t += f"k{self.splits}"
        if self.stream_k and with_walk:
            t += "sk"
        if self.k_serpentine and with_walk:
            t += "z"
        if self.stages is not None:
            t += f"s{self.stages}"
        return t

    @classmethod
    def from_tag(cls, tag: str) -> Tile:
        """The tile a tag names; ConfigError on a malformed tag."""
        m = _TAG.fullmatch(tag.strip())
        if m is None:
            raise ConfigError(f"config tag: {tag!r} is not <pp|coop><block_m>x<block_n>[t][c<cluster_m>][cn<cluster_n>]"
                              f"[g<group_m>][r<m|n|h>][k<splits>][sk][z][s<stages>], e.g. pp128x128, coop256x128c2, "
                              f"pp64x128k4 or pp128x16tk4")
        schedule, block_m, block_n, transposed, cm, cn, group, raster, splits, stream_k, serpentine, stages = \
            m.groups()
        kw = {"schedule": {v: k for k, v in TAG_SCHEDULE.items()}[schedule], "block_m": int(block_m),
              "block_n": int(block_n), "c_major": "m" if transposed else "n", "stream_k": bool(stream_k),
              "k_serpentine": bool(serpentine)}
        for name, text in (("cluster_m", cm), ("cluster_n", cn), ("group_m", group), ("splits", splits),
                           ("stages", stages)):
            if text:
                kw[name] = int(text)
        if raster:
            kw["raster"] = {v: k for k, v in RASTER_TAGS.items()}[raster]
        return cls(**kw)
