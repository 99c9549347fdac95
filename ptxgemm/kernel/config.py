"""GemmConfig: the one place where a GEMM kernel's parameters are validated.

A config is five parts, each a frozen dataclass that checks the rules reading it alone: the tile choice
(kernel/tile.py's Tile: what the selection picks), the operands (dtypes, majors), the fused epilogue (in the kernel's
frame), the grouped kernel's options and the build switches (debug, trace) (kernel/config_parts.py). GemmConfig checks
the rules that tie parts together, one function each, and reads as one flat set of fields: cfg.block_m, cfg.in_dtype
and so on. Every number derived from them is a property defined in kernel/layout.py; the templates receive them
through kernel/params.py and compute nothing of their own, so the PTX, the host launch code and the inspection report
can never disagree.

Shape comments use CUTLASS's convention: A is MxK, B is KxN, C = A*B is MxN.
"""
from __future__ import annotations

import dataclasses
import math
import operator

from ..errors import ConfigError
from .config_parts import (ACTIVATIONS, BIAS_AXES, FP8_DTYPES, GROUPED_FORMS, INPUT_DTYPES, MAJORS,  # noqa: F401
                           OUTPUT_DTYPES, VECTOR_DTYPES, WGMMA_TYPES, Fusion, GroupedOptions, Instrumentation,
                           Operands, default_out_dtype)
from .hardware import SMEM_PER_BLOCK_OPTIN
from .layout import FILL_STAGES, KernelLayout
from .part import dtype_name, field_values  # noqa: F401 - dtype_name: the plan's keys and checks read it here
from .tile import (C_MAJORS, MAX_SPLITS, RASTERS, SCHEDULES, Tile, serpentine_refusal,  # noqa: F401
                   stream_k_refusal)

# The names above marked noqa are re-exported: configs are spoken of through this module (ptxgemm.kernel.config).

PTX_FLOAT_TYPES = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}   # PTX's names (cvt, loads)
GELU_CUBIC = 0.044715                       # the tanh form's cubic coefficient
# Accumulators plus the fused epilogue's live values (GemmConfig.fused_registers) per consumer thread: an estimate,
# set from ptxas 13 on pp128x192 (192 accumulators), where bias + GELU (196) compiled without spills, alpha with
# rowwise scales (199) spilled 20 bytes and a source tile with a row bias (213) 188 bytes; configs past it are
# refused. Under it ptxas may still spill (it hoists the column loads as far as it sees room: tests/test_epilogue.py
# KNOWN_SPILLS), so the selection compiles its fused pick and walks past one that spills (gemm._resolve_config).
FUSED_REGISTER_BUDGET = 196
SCALE_BLOCK = 128                           # blockwise scaling: A's scales per 1x128, B's per 128x128 block
# Blockwise scaling keeps the promoted sums and k-tile products in registers (blockscale.ptx.j2). Where three sets
# fit (the sums and two k-tiles' products: 64 x 128 per consumer at most), the k-tiles alternate two product sets by
# parity, so one retires and is promoted while the next one's wgmmas run. A wider tile keeps one product set of one
# m64 row block (DeepGEMM's layout): each row block's wgmmas retire and are promoted before the next are issued, and
# the other consumer's wgmmas fill the tensor core meanwhile. 192 registers of sets, with the scale addresses and the
# loop's registers, fit the consumers' 232 without spills (ptxas 13: coop128x128 and pp64x128 with two product sets,
# coop128x192 and coop256x128 with one); 128 x 256 per consumer would need 256.
BLOCK_SCALE_ACC_BUDGET = 192
# The one-set mainloop loads each k-tile's A scales this many k-tiles ahead of their promotion (blockscale.ptx.j2).
# One was not enough on the H100: under the operands' TMA traffic the loads took longer than a k-tile (ncu source
# counters: the promotion waited on them).
SCALE_LOOKAHEAD = 2
# ... and the narrow unsplit 64-row tiles in a ring deeper than the default (block_n up to this, more than
# layout.FILL_STAGES stages, dense, no split-K, the store untransposed: what was measured) take the one-set loop too,
# where two sets fit. Measured on the H200 (DeepGEMM's kernel durations, L2 flushed; perf-notes, issue 49, runs 89,
# 91 and 92): pp64x64s13 one set against two, 64x4096x7168 14.1 against 14.8 us, 128x4096x7168 14.7 against 15.3,
# 128x2112x7168 13.1 against 14.2, 128x24576x1536 18.6 against 20.0, 64x7168x16384 40.0 against 40.0; pp64x32s16
# 1-2.5% faster on every shape. At the default 8 stages it lost: pp64x64 at 64x7168x2048 8.02-8.21 against
# 7.85-7.95. Why the deep ring gains is not isolated (both loops take B's scales with the stage). The split tiles
# were level or up to 5% slower with one set (pp64x128k2 at 128x4096x7168, run 89), and the 128-wide tile was not
# timed with it: they keep two.
BLOCK_SCALE_ONE_SET_MAX_N = 64
PTX_VERSION = "8.0"

#: the parts, as GemmConfig's fields name them, in order
PARTS = {"tile": Tile, "operands": Operands, "fusion": Fusion, "grouping": GroupedOptions,
         "instrumentation": Instrumentation}
#: every flat field, in the parts' order: the part it belongs to (the routing table of GemmConfig's reads and
#: construction; a field added to a part is a field of the config at once)
FIELD_PARTS = {f.name: part for part, cls in PARTS.items() for f in dataclasses.fields(cls)}
if len(FIELD_PARTS) != sum(len(dataclasses.fields(cls)) for cls in PARTS.values()):
    raise ImportError("kernel/config_parts.py: two parts hold a field of one name")
_DEFAULT_PARTS = {part: cls() for part, cls in PARTS.items()}
_PART_VALUES = {part: field_values(cls) for part, cls in PARTS.items()}
_flat_values = operator.itemgetter(*FIELD_PARTS)


@dataclasses.dataclass(frozen=True, init=False, repr=False, eq=False)
class GemmConfig(KernelLayout):
    """A GEMM kernel: five parts, read as one flat set of fields. Everything not given is derived; invalid
    combinations raise ConfigError.

    `GemmConfig(block_m=64, bias="col")` takes any flat field (FIELD_PARTS routes it to its part), the parts
    themselves (`GemmConfig(tile=Tile(...), operands=...)`), or both: a flat field overrides its part's value, which
    is how `dataclasses.replace(cfg, debug=True)` works (it passes the five parts and the change). `cfg.replace(...)`
    says the same. Every flat field reads as an attribute (`cfg.block_m`), `GemmConfig.block_m` is its default, and
    `cfg.fields()` is the flat dict (dataclasses.asdict is nested: the parts). Equal configs are equal and hash
    alike; the hash is computed once (configs key the plan caches, hashed on every call)."""

    tile: Tile = _DEFAULT_PARTS["tile"]
    operands: Operands = _DEFAULT_PARTS["operands"]
    fusion: Fusion = _DEFAULT_PARTS["fusion"]
    grouping: GroupedOptions = _DEFAULT_PARTS["grouping"]
    instrumentation: Instrumentation = _DEFAULT_PARTS["instrumentation"]

    def __init__(self, tile: Tile | None = None, operands: Operands | None = None, fusion: Fusion | None = None,
                 grouping: GroupedOptions | None = None, instrumentation: Instrumentation | None = None, **flat):
        changes: dict = {}
        for name, value in flat.items():
            part = FIELD_PARTS.get(name)
            if part is None:
                raise TypeError(f"GemmConfig.__init__() got an unexpected keyword argument {name!r}")
            changes.setdefault(part, {})[name] = value
        state = self.__dict__
        for (part, cls), given in zip(PARTS.items(), (tile, operands, fusion, grouping, instrumentation)):
            change = changes.get(part)
            if given is None:
                given = cls(**change) if change else _DEFAULT_PARTS[part]   # the part checks its own rules
            elif type(given) is not cls:
                raise ConfigError(f"{part}: must be a {cls.__name__}, got {type(given).__name__} {given!r}")
            elif change and any(type(value) is not type(old := getattr(given, name)) or value != old
                                for name, value in change.items()):
                # a part given with changes is made anew; one whose values they repeat (the selection completes
                # every candidate with the problem's dtypes and epilogue, mostly the ones it has) is kept as it is
                given = given.replace(**change)
            state[part] = given
            # the flat fields, as plain attributes: reading one costs what a dataclass field's read does (the
            # kernel's properties read them thousands of times per rendering, the selection per candidate)
            names, values = _PART_VALUES[part]
            state.update(zip(names, values(given)))
        # what equality and the hash compare: every flat value in one tuple, compared and hashed in C, the hash once
        state["_key"] = key = _flat_values(state)
        state["_hash"] = hash(key)
        self.__post_init__()

    def __post_init__(self):
        for rule in _RULES:
            rule(self)

    def __eq__(self, other):
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self is other or (self._hash == other._hash and self._key == other._key)

    def __hash__(self):
        return self._hash

    def __reduce__(self):
        # rebuilt from the parts (and so re-hashed: a str's hash differs between processes)
        return GemmConfig, (self.tile, self.operands, self.fusion, self.grouping, self.instrumentation)

    def __repr__(self) -> str:
        changed = ", ".join(f"{k}={v!r}" for k, v in self.fields().items() if v != getattr(GemmConfig, k))
        return f"GemmConfig({changed})"

    def fields(self) -> dict:
        """Every flat field by name, in the parts' order (what `GemmConfig(**cfg.fields())` makes again)."""
        return dict(zip(FIELD_PARTS, self._key))

    def replace(self, **changes) -> GemmConfig:
        """This config with `changes` (flat fields or parts), checked anew."""
        return dataclasses.replace(self, **changes)

    @property
    def fp8(self) -> bool:
        return self.in_dtype in FP8_DTYPES

    # --- blockwise scaling's derived shape (blockscale.ptx.j2) -----------------------------------------------
    @property
    def bs_product_sets(self) -> int:
        """k-tile product sets the blockwise mainloop keeps: 2 (whole consumer tiles, alternated by the k-tile's
        parity) where they fit beside the sums, else 1 (one m64 row block's, reused by each row block in turn), 0
        where not even that fits (BLOCK_SCALE_ACC_BUDGET); 1 also for the narrow unsplit dense 64-row tiles in a
        deep ring (BLOCK_SCALE_ONE_SET_MAX_N)."""
        # (a 64-row tile is a pingpong one, which neither the grouped kernel nor blockwise stream-K takes)
        if (self.block_m == 64 and self.block_n <= BLOCK_SCALE_ONE_SET_MAX_N and self.num_stages > FILL_STAGES
                and not self.split_k and not self.transposed_store):
            return 1
        if self.bs_two_sets_fit:
            return 2
        return 1 if self.acc_registers + self.acc_per_half <= BLOCK_SCALE_ACC_BUDGET else 0

    @property
    def bs_two_sets_fit(self) -> bool:
        """Whether two k-tile product sets fit beside the blockwise sums (BLOCK_SCALE_ACC_BUDGET); a tile where they do
        not is one of the wide one-set tiles."""
        return 3 * self.acc_registers <= BLOCK_SCALE_ACC_BUDGET

    @property
    def bs_a_scales(self) -> int:
        """A's scales a thread holds per k-tile: one per row it holds (2 per m64 row block), or, swapped, one per
        column it holds (2 of every 8: block_n / 4)."""
        return self.block_n // 4 if self.block_scale_swapped else 2 * self.m_halves

    @property
    def bs_swapped_registers(self) -> int:
        """Swapped blockwise scales: the registers of the sums, two product sets and every rotating set of A's
        per-column scales (the swap-AB tiles keep two product sets; checked against BLOCK_SCALE_ACC_BUDGET)."""
        return 3 * self.acc_registers + self.bs_scale_sets * self.bs_a_scales

    @property
    def bs_scale_sets(self) -> int:
        """Register sets the blockwise loop rotates its scales through: it loads a k-tile's scales SCALE_LOOKAHEAD
        k-tiles before it issues that k-tile, so the sets hold those, the k-tile being promoted and, with two
        product sets, the k-tile issued beside it."""
        return SCALE_LOOKAHEAD + (1 if self.bs_product_sets == 1 else 2)

    @property
    def bs_unroll(self) -> int:
        """Copies of the blockwise k-loop's body: the sets rotate by name, so one copy per set, and with two product
        sets a common multiple with their parity. A tile's last k-tile ends the loop in copy (k_tiles - 1) mod
        bs_unroll, which has its own drain."""
        sets = self.bs_scale_sets
        return sets if self.bs_product_sets == 1 else math.lcm(sets, 2)

    @property
    def bs_b_boundaries(self) -> tuple[int, ...]:
        """Where, in the tile's columns, B's second scale block begins, for each tile start n0 = j * block_n the
        kernel meets: SCALE_BLOCK - n0 % SCALE_BLOCK, or block_n where the whole tile lies in one block. The first
        entry is j = 0's (one block when block_n divides SCALE_BLOCK); each entry is one copy of the promotion.
        Swapped, B's scales index the rows (one block per consumer tile) and the columns have none: (block_n,)."""
        if self.block_scale_swapped:
            return (self.block_n,)
        seen = []
        for j in range(SCALE_BLOCK):
            t = min(SCALE_BLOCK - j * self.block_n % SCALE_BLOCK, self.block_n)
            if t not in seen:
                seen.append(t)
        return tuple(seen)

    def describe(self) -> str:
        return ((f"grouped ({self.grouped}) " if self.grouped else "")
                + f"{self.schedule} GEMM {self.block_m}x{self.block_n}x{self.block_k}, {self.num_stages} stages, "
                + (f"cluster {self.cluster_m}x1 (B multicast), " if self.cluster_m > 1 else "")
                + (f"cluster 1x{self.cluster_n} (A multicast), " if self.cluster_n > 1 else "")
                + (f"raster {self.raster}, " if self.raster != GemmConfig.raster else "")
                + (f"split-K {self.splits}, " if self.split_k else "")
                + (f"the final split {self.split_lead} k-tiles longer, " if self.split_lead else "")
                + ("stream-K tail, " if self.stream_k and not self.sk_wave else "")
                + ("stream-K tail with a full wave, " if self.sk_wave else "")
                + ("serpentine k-loop, " if self.k_serpentine else "")
                + ("C stored transposed (swap-AB), " if self.transposed_store else "")
                + (f"{self.in_dtype}->{self.out_dtype}" if self.b_type == self.in_dtype else
                   f"{self.in_dtype} x {self.b_type}->{self.out_dtype}")
                + f", A {self.a_major}-major, B {self.b_major}-major"
                + (f", epilogue {self.epilogue_summary()}" if self.fused or self.block_scale else "")
                + (", DEBUG waits" if self.debug else "") + (", traced" if self.trace else ""))

    def epilogue_summary(self) -> str:
        """The fused epilogue as a formula, e.g. 'gelu(alpha*acc*r[m]*c[n] + beta*S(bfloat16) + bias[n])'."""
        v = "acc" + (("[blockwise scaled, swapped]" if self.block_scale_swapped else
                      "[blockwise scaled, A's scales M-major]" if self.block_scale_a_mn else "[blockwise scaled]")
                     if self.block_scale else "")
        v = ("alpha*" if self.alpha else "") + ("s_a*s_b*" if self.device_scales else "") + v + ("*r[m]" if self.row_scale else "") + ("*c[n]" if self.col_scale else "")
        if self.has_source:
            v += f" + beta*S({self.source_dtype})"
        if self.bias:
            v += f" + bias[{'m' if self.bias == 'row' else 'n'}]({self.bias_dtype})"
        v = f"{self.activation}({v})" if self.activation else v
        return v + (", column vectors read in pairs" if self.col_pairs else "")

    @property
    def kernel_name(self) -> str:
        return "gemm_grouped" if self.grouped else f"gemm_{self.schedule}"

    # --- the tile choice and its short name (bench rows, tune cache, CLI) ---------------------------------------
    @property
    def tag(self) -> str:
        """The tile choice's tag (Tile.tag); dtypes, layouts, the epilogue, debug and trace are not part of it."""
        return self.tile.tag

    @property
    def tile_tag(self) -> str:
        return self.tile.tile_tag

    @classmethod
    def from_tag(cls, tag: str, **fields) -> GemmConfig:
        """The config a tag names (Tile.from_tag), with `fields` (dtypes, majors, epilogue, ...) added."""
        return cls(**{**Tile.tag_fields(tag), **fields})

    def report_extras(self) -> dict:
        producer_regs, consumer_regs = self.register_split
        return {
            "config": self.fields(),
            "block_k": self.block_k,
            "stages": self.num_stages,
            "smem_bytes": self.smem_bytes,
            "smem_map": {"a": self.smem_a, "b": self.smem_b, "c": self.smem_c, "source": self.smem_source,
                         "a_scales": self.smem_bs_a, "b_scales": self.smem_bs_b, "full_barriers": self.smem_full, "empty_barriers": self.smem_empty,
                         "source_barriers": self.smem_src_full, "end": self.smem_bytes},
            "stage_bytes": self.stage_bytes,
            "epilogue_bytes": self.epilogue_bytes,
            "threads": self.threads,
            "registers": {"entry": self.entry_registers, "producer_after_setmaxnreg": producer_regs,
                          "consumer_after_setmaxnreg": consumer_regs, "accumulators_per_consumer_thread":
                          self.acc_registers},
        }


# --- the rules across parts: one function each, named for what it checks, in the order GemmConfig runs them ---

def _stream_k_rules(cfg: GemmConfig) -> None:
    """tile x grouping x fusion: the stream-K tail cuts a unit's k-range anywhere, so only loops that run any k-range
    take it (the tile's own half of the rule, the schedule and split-K, is Tile's)."""
    if not cfg.stream_k:
        return
    refused = [name for name, on in (("grouped='k'", cfg.grouped == "k"), ("block_scale", cfg.block_scale),
                                     ("source_dtype", cfg.source_dtype is not None)) if on]
    if refused:
        raise stream_k_refusal(refused)
    if cfg.sk_wave and cfg.grouped is not None:
        raise ConfigError("sk_wave: the grouped kernel cuts its tail on the device from the counts "
                          "(streamk.ptx.j2's split_on_device), which folds no wave into it; use stream_k alone")


def _serpentine_rules(cfg: GemmConfig) -> None:
    """tile x grouping x fusion: the backward k-loop only where nothing asks which k-tile a stage holds (split-K,
    which reads the tile alone, is Tile's)."""
    if not cfg.k_serpentine:
        return
    refused = [name for name, on in (("grouped", cfg.grouped is not None), ("block_scale", cfg.block_scale)) if on]
    if refused:
        raise serpentine_refusal(refused)


def _split_lead_rules(cfg: GemmConfig) -> None:
    """tile x fusion: a final split longer than its partials only where the k-loop reads its unit's count from the
    one register every role sets per unit (blockwise scaling's loops and scale walkers count k-blocks by the
    launch's k_tiles; the tile's own half, split-K itself, is Tile's)."""
    if cfg.split_lead and cfg.block_scale:
        raise ConfigError("split_lead: blockwise scaling's k-loop and scale copies count every split's k-blocks "
                          "by the launch's k_tiles, so its splits stay even; use split_lead=0 with block_scale")


def _source_rules(cfg: GemmConfig) -> None:
    """fusion x tile: the source tile is loaded as whole rows of 128-byte panels of the output tile."""
    if cfg.source_dtype is None:
        return
    if cfg.transposed_store or cfg.split_k:
        raise ConfigError("source_dtype: the source tile is loaded as rows of the output tile, once per "
                          "tile: not with the transposed store or split-K")
    if cfg.block_n % cfg.src_panel_cols:
        raise ConfigError(f"source_dtype: block_n ({cfg.block_n}) must be a whole number of the source's "
                          f"{cfg.src_panel_cols}-column (128-byte) panels")


def _fused_register_rules(cfg: GemmConfig) -> None:
    """fusion x tile: the accumulators and the fused epilogue's live values within FUSED_REGISTER_BUDGET."""
    if cfg.fused and cfg.acc_registers + cfg.fused_registers > FUSED_REGISTER_BUDGET:
        raise ConfigError(f"block_m x block_n: {cfg.consumer_m}x{cfg.block_n} per consumer keeps "
                          f"{cfg.acc_registers} accumulators, and this epilogue ({cfg.epilogue_summary()}) "
                          f"{cfg.fused_registers} more live values: over {FUSED_REGISTER_BUDGET}, it would spill")


def _block_scale_rules(cfg: GemmConfig) -> None:
    """fusion x operands x tile x grouping: blockwise scaling's inputs, tiles and registers."""
    if not cfg.block_scale:
        return
    if not cfg.fp8:
        raise ConfigError(f"block_scale: blockwise scaling is for fp8 inputs (one k-tile is one "
                          f"{SCALE_BLOCK}-wide scale block), got {cfg.in_dtype}")
    if cfg.block_scale_a_mn and (cfg.block_scale_swapped or cfg.grouped not in (None, "contiguous")):
        raise ConfigError(f"block_scale_a_mn: A's M-major scales are loaded by TMA with the stage, one box of the "
                          f"tile's rows, in the unswapped dense and contiguous grouped kernels only (a swapped "
                          f"kernel indexes them by its columns; a masked group's rows start at its own matrix, "
                          f"which one M-major table does not hold); got {cfg.tag}"
                          f"{', swapped' if cfg.block_scale_swapped else ''}"
                          f"{f', grouped {cfg.grouped}' if cfg.grouped else ''}")
    if cfg.block_scale_swapped:
        if cfg.cooperative or cfg.grouped or cfg.consumer_m > SCALE_BLOCK:
            raise ConfigError(f"block_scale_swapped: the swapped scales are built for pingpong tiles whose "
                              f"rows lie in one {SCALE_BLOCK}-row block of B's scales, not grouped; got "
                              f"{cfg.tag}{', grouped' if cfg.grouped else ''}")
        if cfg.bs_swapped_registers > BLOCK_SCALE_ACC_BUDGET:
            raise ConfigError(f"block_scale_swapped: {cfg.consumer_m}x{cfg.block_n} per consumer keeps "
                              f"{3 * cfg.acc_registers} registers of sums and two product sets and "
                              f"{cfg.bs_scale_sets * cfg.bs_a_scales} of A's scales (one per column, in "
                              f"{cfg.bs_scale_sets} rotating sets): over {BLOCK_SCALE_ACC_BUDGET}, it "
                              f"would spill (pp64x64t, pp128x32t and narrower fit)")
    elif cfg.block_n - SCALE_BLOCK > math.gcd(cfg.block_n, SCALE_BLOCK):
        raise ConfigError(f"block_scale: a tile's columns may span at most two {SCALE_BLOCK}-column blocks "
                          f"of B's scales (block_n <= {SCALE_BLOCK} + gcd(block_n, {SCALE_BLOCK}): 144, 160 "
                          f"and 192 do, 176 and 208 do not); got {cfg.block_n}")
    if cfg.bs_product_sets == 0:
        raise ConfigError(f"block_scale: {cfg.consumer_m}x{cfg.block_n} per consumer needs "
                          f"{cfg.acc_registers + cfg.acc_per_half} accumulator registers (the promoted "
                          f"sums and one row block's k-tile products); at most {BLOCK_SCALE_ACC_BUDGET}")


def _grouped_rules(cfg: GemmConfig) -> None:
    """grouping x tile x fusion x operands: what the grouped kernel is built for."""
    if cfg.grouped is None:
        return
    refused = [name for name, on in (("schedule='pingpong'", not cfg.cooperative),
                                     ("cluster_n", cfg.cluster_n > 1),
                                     ("splits", cfg.split_k), ("c_major='m'", cfg.transposed_store),
                                     ("raster='hilbert'", cfg.raster == "hilbert"),
                                     ("source_dtype", cfg.has_source)) if on]
    if refused:
        raise ConfigError(f"grouped: the grouped kernel is the cooperative schedule, on single CTAs or pairs "
                          f"along M (cluster_m 2: both tile rows in one group, sharing its B panel), without a "
                          f"source tile; it does not take {', '.join(refused)}")
    if cfg.grouped == "k" and (cfg.block_scale or cfg.row_scale or cfg.col_scale or cfg.bias):
        raise ConfigError("grouped: the k form takes per-tensor scales only (its rows and columns are the "
                          "weights'; no vector or block scale belongs to a group's K range)")
    if cfg.grouped == "k" and (cfg.a_major, cfg.b_major) != ("mn", "mn"):
        raise ConfigError(f"grouped: the k form reads A and B MN-major (a is (M, total_K) with M contiguous, b "
                          f"(total_K, N) with N contiguous: the activations' and gradients' own layouts), got A "
                          f"{cfg.a_major}-major, B {cfg.b_major}-major")
    if cfg.epi_tail_cols:
        raise ConfigError(f"grouped: block_n must be a whole number of {cfg.epi_panel_cols}-column output "
                          f"panels (a group's last rows are stored panel by panel), got {cfg.block_n}")


def _trace_rules(cfg: GemmConfig) -> None:
    """instrumentation x grouping: the timeline is recorded by the dense kernel only."""
    if cfg.trace and cfg.grouped is not None:
        raise ConfigError("trace: the grouped kernel records no timeline (its scheduler and row-predicated store "
                          "have no trace events); trace the dense GEMM of either schedule, split-K included")


def _cluster_split_rules(cfg: GemmConfig) -> None:
    """tile x operands: a pair along M (cluster_m 2) shares B, each CTA loading half of its rows and multicasting
    them. MN-major B lies in 64-column panels, which the halves must not cut. K-major B lies in rows of 128 bytes,
    and a half must start on a whole 8-row swizzle atom (1024 bytes) of the stage, as the 128B swizzle repeats:
    Tile's own rule (block_n a multiple of 16) already makes every half so."""
    if cfg.cluster_m == 2 and cfg.b_major == "mn" and cfg.block_n % 128:
        raise ConfigError(f"cluster_m: 2 splits MN-major B's 64-column panels evenly between the pair, so block_n "
                          f"must be a multiple of 128, got {cfg.block_n}")


def _shared_memory_rules(cfg: GemmConfig) -> None:
    """every part: the stages (tile, operands) beside the epilogue buffer (tile, operands, fusion) and the grouped
    kernel's tables in shared memory."""
    most = cfg.most_stages
    if most < 2:
        raise ConfigError(f"block_m x block_n: {cfg.block_m}x{cfg.block_n} leaves room for fewer than 2 stages"
                          + (f" beside the {cfg.source_bytes} B source tile" if cfg.source_bytes else ""))
    if cfg.stages is not None and cfg.stages > most:
        raise ConfigError(f"stages: {cfg.stages} stages of {cfg.ring_stage_bytes} B plus the {cfg.epilogue_bytes} B "
                          f"epilogue buffer exceed {SMEM_PER_BLOCK_OPTIN} B of shared memory (at most {most})")


_RULES = (_cluster_split_rules, _stream_k_rules, _serpentine_rules, _split_lead_rules, _source_rules,
          _fused_register_rules, _block_scale_rules, _grouped_rules, _trace_rules, _shared_memory_rules)

# GemmConfig.block_m and the like: each flat field's default, read where a value is compared with it (describe,
# __repr__); an instance's own value (set in __init__) hides it
for _name, _part in FIELD_PARTS.items():
    setattr(GemmConfig, _name, getattr(_DEFAULT_PARTS[_part], _name))
del _name, _part
