"""The tile choice: what the selection picks, the tune cache stores and a short tag names (schedule, block sizes,
stages, cluster, rasterization, split-K or the stream-K tail, and whether the store is transposed for swap-AB). The
operands' dtypes and layouts, the fused epilogue and the build switches are not part of it: the problem and the caller
decide those (kernel/config_parts.py; a GemmConfig is the five parts, `GemmConfig.tile` this one). A Tile checks the
rules that read the tile alone; GemmConfig those that tie it to the other parts.
"""
from __future__ import annotations

import dataclasses
import re

from ..errors import ConfigError
from .hardware import MAX_STAGES
from .layout import TileLayout
from .part import Part

# pingpong: each consumer owns whole tiles and the two alternate (one's epilogue under the other's mainloop);
# cooperative: both consumers share every tile, each the half of its rows; stores overlap the next mainloop.
SCHEDULES = ("pingpong", "cooperative")
# Grouped rasterization (Triton's): "m" walks group_m tile-rows down before moving one column right (the CTAs running
# at once share B's column panels and a few of A's row panels), "n" walks group_m tile-columns across first.
# "hilbert" walks a generalized Hilbert curve over the grid of units (ptxgemm.kernel.schedule.hilbert_order), so that units
# run at the same time stay close in both directions; the host computes the order once per grid shape and the kernel
# reads it from a table.
RASTERS = ("m", "n", "hilbert")
# The kernel's output layout: "n" stores each tile as rows of a row-major C (N contiguous); "m" stores it transposed,
# as columns of a column-major C (M contiguous). "m" is how swap-AB writes a row-major result: the host runs
# C^T = B^T A^T (the wide N fills wgmma's 64-row M, the small M becomes a narrow wgmma N) and the kernel stores
# each C^T tile transposed, i.e. straight into C's rows (ptxgemm.plan.operands chooses the swap from the layout).
C_MAJORS = ("n", "m")
MAX_SPLITS = 16                    # split-K: k-ranges per output tile (fp32 partials, a fixed-order fix-up)
MAX_SPLIT_LEAD = 64                # split-K: the most k-tiles the final split may run beyond each partial's count
# fp32 accumulators per consumer thread that fit beside the addresses in the consumers' 240 registers
MAX_ACC_REGISTERS = 192

TAG_SCHEDULE = {"pingpong": "pp", "cooperative": "coop"}
RASTER_TAGS = {"m": "m", "n": "n", "hilbert": "h"}
_TAG = re.compile(r"(pp|coop)(\d+)x(\d+)(t)?(?:c(\d+))?(?:cn(\d+))?(?:g(\d+))?(?:r([mnh]))?"
                  r"(?:k(\d+)(?:l(\d+))?)?(sk)?(w)?(z)?(?:s(\d+))?")


def stream_k_refusal(refused: list[str]) -> ConfigError:
    """The stream-K tail's rule, refusing the fields named in `refused`: one sentence for its half that reads the
    tile (Tile) and the half that reads the other parts (GemmConfig)."""
    return ConfigError(f"stream_k: the stream-K tail runs the cooperative schedule, whose two consumers read "
                       f"every k-tile of a unit, so a unit's k-range may have any length; it does not take "
                       f"{', '.join(refused)} (pingpong's consumers skip each other's k-tiles by a fixed "
                       f"count; split-K already cuts K; the k-grouped, blockwise and source-tile loops "
                       f"assume whole tiles)")


def serpentine_refusal(refused: list[str]) -> ConfigError:
    """The serpentine k-loop's rule, refusing the fields named in `refused` (as stream_k_refusal)."""
    return ConfigError(f"k_serpentine: the backward k-loop is built for the dense walk of whole tiles, whose "
                       f"consumers never ask which k-tile a stage holds; it does not take {', '.join(refused)} "
                       f"(split-K's units are k-ranges already, the grouped walks set their own k-loops, and "
                       f"the blockwise consumers index their scales by k-tile)")


@dataclasses.dataclass(frozen=True)
class Tile(Part, TileLayout):
    """A tile choice, checked on its own (block sizes per schedule, clusters, stages, splits, rasterization)."""

    schedule: str = "pingpong"    # SCHEDULES: how the two consumer warpgroups share the tiles
    block_m: int = 128            # CTA tile rows; pingpong: one consumer's, cooperative: both consumers' halves
    block_n: int = 128            # tile columns (the wgmma N)
    stages: int | None = None     # None: as many as fit in shared memory (up to MAX_STAGES); see num_stages
    cluster_m: int = 1            # CTAs per cluster along M; 2: the pair shares B, each loads half and multicasts
    cluster_n: int = 1            # CTAs per cluster along N; 2: the pair shares A, each loads half and multicasts
    group_m: int = 8              # rasterization: tiles walk group_m tile-rows (raster "m") or tile-columns ("n")
    raster: str = "m"             # RASTERS: grouped down tile-rows ("m"), across tile-columns ("n"), or "hilbert"
    splits: int = 1               # split-K: each output tile's k-loop cut into this many units of the schedule
    split_lead: int = 0           # split-K: k-tiles the last split (the final) runs beyond each partial's count. The
    #                               final waits ~1 us after its own k-loop for the partials' stores and flag (run
    #                               120's traces); a longer range fills that wait (schedule.effective_splits)
    c_major: str = "n"            # C_MAJORS: tiles stored as rows ("n") or transposed, as columns ("m"; swap-AB)
    stream_k: bool = False        # stream-K tail: whole tiles for the full waves, then the last partial wave's k-tiles
    #                               spread evenly over every cluster, fixed up in fp32 (streamk.ptx.j2)
    sk_wave: bool = False         # the stream-K tail takes one full wave with it (where there is one): every cluster's
    #                               share is then a unit or more, so a thin tail is not cut into quarter-unit shares
    #                               that leave clusters idle, and a final adds one partial (Schedule.sk_units)
    k_serpentine: bool = False    # the walk's odd passes (units cta + G, cta + 3G, ...) load their k-tiles from the
    #                               last to the first, so each wave starts on the k-tiles the wave before it read last,
    #                               which L2 still holds (scheduler.ptx.j2: k_direction; issue 26 step 12)

    def __post_init__(self):
        self.check_types()
        if self.schedule not in SCHEDULES:
            raise ConfigError(f"schedule: must be one of {SCHEDULES}, got {self.schedule!r}")
        allowed_m = (64, 128) if self.schedule == "pingpong" else (128, 256)
        if self.block_m not in allowed_m:
            raise ConfigError(f"block_m: the {self.schedule} schedule takes {allowed_m[0]} or {allowed_m[1]} (each "
                              f"consumer one or two m64 wgmma rows), got {self.block_m}")
        if self.block_n % 16 or not 16 <= self.block_n <= 256:
            raise ConfigError(f"block_n: must be a multiple of 16 in 16..256 (the epilogue stores 16-column blocks; "
                              f"a last output panel narrower than 64 columns goes out through its own tensor map), "
                              f"got {self.block_n}")
        if not 1 <= self.splits <= MAX_SPLITS:
            raise ConfigError(f"splits: must be an integer in 1..{MAX_SPLITS} (k-ranges per output tile), "
                              f"got {self.splits!r}")
        if not 0 <= self.split_lead <= MAX_SPLIT_LEAD:
            raise ConfigError(f"split_lead: must be an integer in 0..{MAX_SPLIT_LEAD} (k-tiles the final split runs "
                              f"beyond each partial), got {self.split_lead!r}")
        if self.split_lead and not self.split_k:
            raise ConfigError(f"split_lead: lengthens the last split's k-range, so it needs split-K (splits >= 2), "
                              f"got splits={self.splits}")
        if self.c_major not in C_MAJORS:
            raise ConfigError(f"c_major: must be one of {C_MAJORS}, got {self.c_major!r}")
        # the halves of the walk's rules that read the tile alone (GemmConfig checks the others)
        if self.stream_k and (not self.cooperative or self.split_k):
            raise stream_k_refusal([name for name, on in (("schedule='pingpong'", not self.cooperative),
                                                          ("splits", self.split_k)) if on])
        if self.sk_wave and not self.stream_k:
            raise ConfigError("sk_wave: folds a full wave into the stream-K tail, so it needs stream_k=True")
        if self.k_serpentine and self.split_k:
            raise serpentine_refusal(["splits"])
        if self.c_major == "m" and self.cooperative:
            raise ConfigError("c_major: the transposed (column) store is built for the pingpong schedule, whose "
                              "epilogue writes the whole tile at once; use schedule='pingpong'")
        if self.c_major == "m" and self.cluster_size > 1:
            raise ConfigError("c_major: the transposed store runs on single CTAs (cluster_m and cluster_n 1): it is "
                              "for problems with too few tiles to pair")
        if self.acc_registers > MAX_ACC_REGISTERS:
            raise ConfigError(f"block_m x block_n: {self.block_m}x{self.block_n} needs {self.acc_registers} fp32 "
                              f"accumulator registers per thread; at most {MAX_ACC_REGISTERS} fit beside addresses "
                              f"in 240")
        if self.stages is not None and not 2 <= self.stages <= MAX_STAGES:
            raise ConfigError(f"stages: must be in 2..{MAX_STAGES}, got {self.stages}")
        if not 1 <= self.group_m <= 64:
            raise ConfigError(f"group_m: must be in 1..64, got {self.group_m}")
        if self.cluster_m not in (1, 2):
            raise ConfigError(f"cluster_m: must be 1 or 2, got {self.cluster_m}")
        if self.cluster_n not in (1, 2):
            raise ConfigError(f"cluster_n: must be 1 or 2, got {self.cluster_n}")
        if self.cluster_n == 2 and self.block_m % 128:
            raise ConfigError(f"cluster_n: 2 splits A's 64-row panels evenly between the pair, so block_m must be "
                              f"a multiple of 128, got {self.block_m}")
        if self.cluster_m > 1 and self.cluster_n > 1:
            raise ConfigError("cluster_m, cluster_n: a cluster pairs CTAs along M (sharing B) or along N (sharing A), "
                              "not both")
        if self.raster not in RASTERS:
            raise ConfigError(f"raster: must be one of {RASTERS}, got {self.raster!r}")

    @classmethod
    def of(cls, config) -> Tile:
        """The tile part of a GemmConfig (or of anything with these fields)."""
        return cls(**{f.name: getattr(config, f.name) for f in dataclasses.fields(cls)})

    @property
    def tag(self) -> str:
        """The tile choice in a few characters: 'pp128x128', 'coop256x128c2' (cluster_m 2), 'coop128x256cn2'
        (cluster_n 2), 'pp128x192g16rns5' (group 16, raster n, 5 stages), 'pp64x128k4' (split-K 4), 'pp64x64k3l8'
        (split-K 3, the final split 8 k-tiles longer than each partial),
        'coop128x256c2sk' (stream-K tail), 'coop128x128skw' (the tail with a full wave), 'coop128x256c2skz' (and the
        serpentine k-loop), 'pp128x16t' (transposed store: swap-AB)."""
        return self._tag(with_walk=True)

    @property
    def tile_tag(self) -> str:
        """The tag without the split count, the stream-K tail (with or without its wave) or the serpentine k-loop:
        what the cost model's per-tile tables are keyed by."""
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
        if self.split_lead and with_walk:
            t += f"l{self.split_lead}"
        if self.stream_k and with_walk:
            t += "sk"
        if self.sk_wave and with_walk:
            t += "w"
        if self.k_serpentine and with_walk:
            t += "z"
        if self.stages is not None:
            t += f"s{self.stages}"
        return t

    @classmethod
    def from_tag(cls, tag: str) -> Tile:
        """The tile a tag names; ConfigError on a malformed tag."""
        return cls(**cls.tag_fields(tag))

    @staticmethod
    def tag_fields(tag: str) -> dict:
        """The fields a tag names (the others are the defaults); ConfigError on a malformed tag. Unchecked, so that
        GemmConfig.from_tag checks them with the fields it adds."""
        m = _TAG.fullmatch(tag.strip())
        if m is None:
            raise ConfigError(f"config tag: {tag!r} is not <pp|coop><block_m>x<block_n>[t][c<cluster_m>][cn<cluster_n>]"
                              f"[g<group_m>][r<m|n|h>][k<splits>[l<split_lead>]][sk[w]][z][s<stages>], e.g. pp128x128, coop256x128c2, "
                              f"pp64x128k4 or pp128x16tk4")
        schedule, block_m, block_n, transposed, cm, cn, group, raster, splits, lead, stream_k, sk_wave, \
            serpentine, stages = m.groups()
        kw = {"schedule": {v: k for k, v in TAG_SCHEDULE.items()}[schedule], "block_m": int(block_m),
              "block_n": int(block_n), "c_major": "m" if transposed else "n", "stream_k": bool(stream_k),
              "sk_wave": bool(sk_wave), "k_serpentine": bool(serpentine)}
        for name, text in (("cluster_m", cm), ("cluster_n", cn), ("group_m", group), ("splits", splits),
                           ("split_lead", lead), ("stages", stages)):
            if text:
                kw[name] = int(text)
        if raster:
            kw["raster"] = {v: k for k, v in RASTER_TAGS.items()}[raster]
        return kw
