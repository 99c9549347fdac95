"""The fused epilogue's arguments: D = act(alpha * (scale_a . A) @ (B . scale_b) + beta * c + bias), then the cast.

`parse` checks every argument against the problem before anything reaches the GPU (a ConfigError names the argument
and the rule) and classifies the scalings by shape. alpha, beta and the per-tensor scales held on the host are finite
numbers (NaN, an infinity, or a value past float32's range would turn every output into NaN or inf):

  scale_a / scale_b        per-tensor                  rowwise                    blockwise (fp8)
  a Python or numpy number  folded into alpha (host)    -                          -
  a 0-d or (1,) numpy array folded into alpha (host)    -                          -
  a 1-element device array, read once by each consumer  -                        a (1, 1) array beside a block
  or a (1, 1) numpy array   and folded into alpha                                  table for the other operand
  an fp32 array             -                           (M,) or (M, 1) / (N,) or   (M, ceil(K/128)) /
                                                        (1, N): per row of A, per   (ceil(K/128), ceil(N/128))
                                                        column of B

bias: (N,) or (1, N) adds one value per column (numpy's broadcasting), (M, 1) one per row; float32, bfloat16 or
float16. c: numpy's result shape, float32, bfloat16 or float16, any strides (it may be the output itself); it is
added only with a beta other than 0, and a beta other than 0 needs a c.

`Epilogue` keeps the arguments in the caller's frame; `config_fields` and `kernel_args` give them in the kernel's,
where a swapped problem (C^T = B^T A^T) trades rows for columns.
"""
from __future__ import annotations

import ctypes
import dataclasses
import math
import numbers
import reprlib

import numpy as np

from ..errors import ConfigError
from ..kernel.config import ACTIVATIONS, FP8_DTYPES, OUTPUT_DTYPES, SCALE_BLOCK, VECTOR_DTYPES
from ..kernel.hardware import TMA_ALIGN


@dataclasses.dataclass(frozen=True)
class Epilogue:
    alpha: float = 1.0                 # the caller's alpha times every per-tensor scale given as a number
    beta: float = 0.0
    source: object = None              # c, a device array (its layout goes through ptxgemm.plan.operands)
    bias: object = None                # a device vector: VECTOR_DTYPES, over rows or columns (bias_axis)
    bias_axis: str | None = None       # "row" (one value per row of the result) or "col"
    activation: str | None = None
    row_scale: object = None           # scale_a per row, an fp32 device vector
    col_scale: object = None           # scale_b per column, an fp32 device vector
    device_a: object = None            # per-tensor scales kept on the device: 1-element fp32 arrays
    device_b: object = None
    block_a: object = None             # blockwise: scale_a (M, ceil(K/128)), scale_b (ceil(K/128), ceil(N/128))
    block_b: object = None
    block_a_mn: bool = False           # scale_a M-major (rows adjacent, its columns 16-byte strided): read by TMA

    @property
    def plain(self) -> bool:
        """Nothing to fuse: the plain GEMM, whose kernel stays byte-identical to the one without an epilogue."""
        return self == PLAIN

    @property
    def indexed(self) -> tuple[bool, bool]:
        """Whether something is indexed by the (row, column) of a problem's result: a batch must not fold into the
        kernel's M where its rows are indexed (operands.plan_matmul)."""
        return (self.row_scale is not None or self.bias_axis == "row" or self.block_a is not None,
                self.col_scale is not None or self.bias_axis == "col" or self.block_b is not None)

    @property
    def adds(self) -> bool:
        """Whether the epilogue adds a term that does not scale the product (c or a bias): with K = 0 only these
        survive (the activations map 0 to 0)."""
        return self.source is not None or self.bias is not None

    def at_k(self, k: int) -> "Epilogue":
        """The epilogue of a problem with K = k: with K = 0 the product is exactly zero whatever the scales and
        alpha, so the result is act(beta * c + bias), and the scalings (empty blockwise tables among them) go."""
        if k:
            return self
        return Epilogue(beta=self.beta, source=self.source, bias=self.bias, bias_axis=self.bias_axis,
                        activation=self.activation)

    def key(self) -> tuple:
        """What a cached plan depends on: the numbers, and each array's address, shape, strides and dtype."""
        def arr(x):
            if x is None:
                return None
            return (x.ptr, tuple(x.shape), tuple(x.strides), np.dtype(x.dtype).name)

        return (self.alpha, self.beta, self.activation, self.bias_axis, arr(self.source), arr(self.bias),
                arr(self.row_scale), arr(self.col_scale), arr(self.device_a), arr(self.device_b), arr(self.block_a),
                arr(self.block_b))

    def config_fields(self, swapped: bool, n: int) -> dict:
        """GemmConfig's epilogue fields in the kernel's frame (rows are its M: the caller's N when swapped; `n` is
        the kernel's N). The column vectors are read in pairs (`col_pairs`) when N is even and each starts on a
        two-element boundary, so that no pair straddles N and every pair load is aligned."""
        rows, cols = (self.col_scale, self.row_scale) if swapped else (self.row_scale, self.col_scale)
        bias = None if self.bias is None else _flip(self.bias_axis) if swapped else self.bias_axis
        col_vectors = [v for v in (cols, self.bias if bias == "col" else None) if v is not None]
        pairs = bool(col_vectors) and n % 2 == 0 and all(
            v.ptr % (2 * np.dtype(v.dtype).itemsize) == 0 for v in col_vectors)
        return {"alpha": self.alpha != 1.0, "row_scale": rows is not None, "col_scale": cols is not None,
                "device_scales": self.device_a is not None or self.device_b is not None,
                "block_scale": self.block_a is not None, "block_scale_swapped": self.block_a is not None and swapped,
                "block_scale_a_mn": self.block_a_mn,
                "source_dtype": None if self.source is None else np.dtype(self.source.dtype).name,
                "bias": bias, "bias_dtype": np.dtype(self.bias.dtype).name if self.bias is not None else "float32",
                "activation": self.activation, "col_pairs": pairs}

    def kernel_params(self, swapped: bool, k: int) -> list[tuple[str, object]]:
        """(name, ctypes value) of the kernel parameters after its tensor maps, named and ordered as fusion_setup's
        `params` declares them (tests/test_emulator.py holds the two together; ptxgemm.tools.emulator reads them by
        name). k: the problem's K."""
        rows, cols = (self.col_scale, self.row_scale) if swapped else (self.row_scale, self.col_scale)
        params = []
        if self.alpha != 1.0:
            params.append(("param_alpha", ctypes.c_float(self.alpha)))
        if self.device_a is not None or self.device_b is not None:   # a null pointer reads as 1
            params += [(f"param_scale_{name}_ptr", ctypes.c_uint64(0 if x is None else x.ptr))
                       for name, x in (("a", self.device_a), ("b", self.device_b))]
        if self.source is not None:
            params.append(("param_beta", ctypes.c_float(self.beta)))
        for name, v in (("param_row_scale", rows), ("param_col_scale", cols)):
            if v is not None:
                params.append((name, ctypes.c_uint64(v.ptr)))
        if self.bias is not None:
            params.append(("param_bias", ctypes.c_uint64(self.bias.ptr)))
        if self.block_a is not None:
            params += [("param_scale_a", ctypes.c_uint64(self.block_a.ptr)),
                       ("param_scale_a_ld", ctypes.c_uint32(_blocks(k))),
                       ("param_scale_b", ctypes.c_uint64(self.block_b.ptr)),
                       # scale_b's row: ceil(N / 128) of the caller's N, swapped or not (parse checked the shape)
                       ("param_scale_b_ld", ctypes.c_uint32(self.block_b.shape[-1]))]
        return params

    def kernel_args(self, swapped: bool, k: int) -> list:
        """The values of kernel_params, in order."""
        return [value for _, value in self.kernel_params(swapped, k)]


PLAIN = Epilogue()


def _flip(axis: str) -> str:
    return "col" if axis == "row" else "row"


def _blocks(x: int) -> int:
    return -(-x // SCALE_BLOCK)


#: the magnitude from which a float rounds to float32's infinity (float32's largest value plus half its last step,
#: a tie that rounds to the even infinity)
_F32_OVERFLOW = 2.0 ** 128 - 2.0 ** 103


def _finite32(x: float) -> bool:
    """Whether `x` reaches the kernel as a finite number: kernel_params packs alpha and beta as ctypes.c_float, where
    a NaN stays NaN and a value past float32's range becomes an infinity, either making every output NaN or inf."""
    return -_F32_OVERFLOW < x < _F32_OVERFLOW   # False for a NaN too


def _number(name: str, x) -> float:
    if type(x) is not float:   # a Python float, the common case, skips the abstract class's slower check
        if isinstance(x, bool) or not isinstance(x, numbers.Real):
            raise ConfigError(f"{name}: must be a real number, got {type(x).__name__}")
        x = float(x)
    if not _finite32(x):
        raise ConfigError(f"{name}: must be a finite real number (the kernel takes it as float32), got {x!r}")
    return x


def is_host_scalar(x) -> bool:
    """Whether `x` is a per-tensor scale held on the host: a real number, or a 0-d or (1,) numpy array (the forms
    _host_scalar reads; a (1, 1) array may be a one-block table, so it is an array)."""
    return ((isinstance(x, numbers.Real) and not isinstance(x, bool))
            or (isinstance(x, np.ndarray) and x.size == 1 and x.ndim < 2))


def _host_scalar(name: str, x):
    """`x` as a float when it is a number or a 0-d or (1,) numpy array (host memory), else None. A (1, 1) array
    is also the shape of a one-block table (M = 1 or N <= 128, K <= 128), so it stays an array (run uploads it,
    see gemm.uploaded). A value held here is known, so it must be finite (a device scale's value is not read)."""
    if not is_host_scalar(x):
        return None
    if not isinstance(x, np.ndarray):
        v = float(x)
    else:
        if x.dtype != np.float32:
            raise ConfigError(f"{name}: a per-tensor scale array must be float32, got {x.dtype}")
        v = float(x.reshape(()))
    if not math.isfinite(v):
        raise ConfigError(f"{name}: a per-tensor scale must be a finite real number, got {v!r}")
    return v


def _is_array(x) -> bool:
    """Whether `x` is an array of some framework: numpy's, a device array (ptxgemm's, the emulator's, a plan's
    stand-in: shape and dtype) or an exporter of DLPack or the CUDA array interface."""
    return ((hasattr(x, "shape") and hasattr(x, "dtype")) or hasattr(x, "__dlpack__")
            or hasattr(x, "__cuda_array_interface__"))


def check_values(*, alpha=1.0, beta=0.0, activation=None, scale_a=None, scale_b=None) -> tuple[float, float]:
    """(alpha, beta) as floats, after the rules that need no problem: alpha and beta finite real numbers, the
    activation's name, each scale a finite number or an array (a tuple, a list or a string is neither: refused by
    name here, not taken for an array by a later conversion). `parse` starts with these; the grouped GEMM calls
    them before it reads any array or builds its cache key (which holds these values)."""
    alpha, beta = _number("alpha", alpha), _number("beta", beta)
    # a str: an object that merely compares equal to a name (numpy's 0-d string array) is not taken for one
    if activation is not None and (not isinstance(activation, str) or activation not in ACTIVATIONS):
        raise ConfigError(f"activation: must be None or one of {ACTIVATIONS} (gelu: the tanh form), got {activation!r}")
    if scale_a is not None or scale_b is not None:   # (most calls have neither)
        for name, x in (("scale_a", scale_a), ("scale_b", scale_b)):
            if x is not None and _host_scalar(name, x) is None and not _is_array(x):
                raise ConfigError(f"{name}: must be a number (per tensor) or a float32 array (per tensor, rowwise or "
                                  f"blockwise), got {type(x).__name__} {reprlib.repr(x)}")
    return alpha, beta


def _unit_along(arr, axis: int, name: str) -> None:
    shape, strides = tuple(arr.shape), tuple(arr.strides)
    item = np.dtype(arr.dtype).itemsize
    if shape[axis] > 1 and strides[axis] != item:
        raise ConfigError(f"{name}: the vector's elements must be adjacent in memory (stride {item} bytes along its "
                          f"length), got strides {strides}; pass a contiguous copy")


def _c_contiguous(arr, name: str) -> None:
    if math.prod(arr.shape) == 0:   # an empty table's strides are never used (frameworks report anything)
        return
    item = np.dtype(arr.dtype).itemsize
    expect, acc = [], item
    for e in reversed(arr.shape):
        expect.append(acc)
        acc *= e
    if any(e > 1 and s != x for e, s, x in zip(arr.shape, arr.strides, reversed(expect))):
        also = (" or M-major (rows adjacent, each k-block's column a multiple of 16 bytes on: DeepGEMM's and torch's "
                "layout)") if name == "scale_a" else ""
        raise ConfigError(f"{name}: a blockwise scale table must be C-contiguous{also}, got strides "
                          f"{tuple(arr.strides)}")


def m_major_ld(rows: int) -> int:
    """The column stride, in scales, of an M-major blockwise scale_a table of `rows` rows: rows padded to a multiple
    of TMA_ALIGN bytes, as DeepGEMM's get_mn_major_tma_aligned_tensor pads it and as _m_major requires."""
    per = TMA_ALIGN // np.dtype(np.float32).itemsize
    return -(-rows // per) * per


def m_major_table(scales: np.ndarray, fill: float = 0.0) -> np.ndarray:
    """scale_a's values (M, kb) as the C-order (kb, m_major_ld(M)) float32 table whose transpose's first M rows
    are their M-major layout (the padding `fill`, never read): `table.T[:M]`, or a device copy viewed (M, kb) with
    strides (4, 4 * ld)."""
    m, kb = scales.shape
    table = np.full((kb, m_major_ld(m)), fill, np.float32)
    table[:, :m] = scales.T
    return table


def _m_major(arr, name: str) -> bool:
    """Whether scale_a's table (M, ceil(K/128)) is M-major, as DeepGEMM's get_mn_major_tma_aligned_tensor and torch's
    blockwise scaled_mm lay it out: rows adjacent (stride 4 bytes), each k-block's column a stride of at least M
    rows on. The kernel reads it by TMA, so that stride is a multiple of 16 bytes and the table 16-byte aligned
    (ConfigError otherwise). A table C-contiguous as well (one k-block, or one row with its k-blocks adjacent) is read
    as C-contiguous; one row with its k-blocks 16-byte strided is M-major."""
    m, kb = (int(e) for e in arr.shape)
    item = np.dtype(arr.dtype).itemsize
    row, col = (int(s) for s in arr.strides)
    if m * kb == 0 or kb == 1 or (m > 1 and row != item) or col == item:
        return False   # empty, one k-block (both layouts at once), rows apart, or one row C-contiguous
    if col < item * m:
        return False   # neither layout: _c_contiguous names the rule
    if col % TMA_ALIGN or arr.ptr % TMA_ALIGN:
        raise ConfigError(f"{name}: an M-major blockwise scale table (rows adjacent) is read by TMA: its column stride "
                          f"must be a multiple of {TMA_ALIGN} bytes (M padded to a multiple of "
                          f"{TMA_ALIGN // item}, as DeepGEMM's get_mn_major_tma_aligned_tensor and torch's "
                          f"blockwise scaled_mm lay it out) and its address {TMA_ALIGN}-byte aligned; got "
                          f"strides {(row, col)} at an address {arr.ptr % TMA_ALIGN} bytes past a multiple "
                          f"of {TMA_ALIGN}")
    return True


def _scale(name: str, x, vector_shapes, block_shape, convert):
    """(kind, value): ("tensor", float), or ("device" | "vector" | "block", the device array)."""
    v = _host_scalar(name, x)
    if v is not None:
        return "tensor", v
    arr = convert(x, name)
    dt = np.dtype(arr.dtype).name
    if dt != "float32":
        raise ConfigError(f"{name}: scales must be float32, got {dt} (convert explicitly: astype(numpy.float32))")
    shape = tuple(arr.shape)
    if math.prod(shape) == 1 and len(shape) <= 2:
        return "device", arr
    if shape in vector_shapes:
        _unit_along(arr, 1 if shape == vector_shapes[1] and name == "scale_b" else 0, name)   # (1, N): along axis 1
        return "vector", arr
    if shape == block_shape:
        if name == "scale_a" and _m_major(arr, name):
            return "block_mn", arr
        _c_contiguous(arr, name)
        return "block", arr
    raise ConfigError(f"{name}: shape {shape} is none of the scalings: a number or a 1-element float32 array "
                      f"(per tensor), {' or '.join(map(str, vector_shapes))} (rowwise), {block_shape} (blockwise, "
                      f"{SCALE_BLOCK}-wide blocks of K)")


def parse(*, c=None, alpha=1.0, beta=0.0, bias=None, activation=None, scale_a=None, scale_b=None, m: int, n: int,
          k: int, in_dtype: str, batched: bool, convert) -> Epilogue:
    """The epilogue of a problem (the caller's m, n, k) as `Epilogue`; `convert(x, name)` makes a device array of
    an argument (matmul: in place; run: an upload). ConfigError names the first broken rule."""
    alpha, beta = check_values(alpha=alpha, beta=beta, activation=activation, scale_a=scale_a, scale_b=scale_b)
    if c is None and beta != 0.0:
        raise ConfigError(f"beta: {beta} scales c, but no c was given")
    if c is not None and beta == 0.0:
        raise ConfigError("c: given, but beta is 0 (the default), so it would not be added; pass beta (e.g. "
                          "beta=1.0), or leave c out")
    source = None
    if c is not None:
        source = convert(c, "c")
        dt = np.dtype(source.dtype).name
        if dt not in OUTPUT_DTYPES:
            raise ConfigError(f"c: dtype must be one of {OUTPUT_DTYPES}, got {dt}")
    vec, axis = None, None
    if bias is not None:
        arr = convert(bias, "bias")
        dt = np.dtype(arr.dtype).name
        if dt not in VECTOR_DTYPES:
            raise ConfigError(f"bias: dtype must be one of {VECTOR_DTYPES}, got {dt}")
        shape = tuple(arr.shape)
        if shape in ((n,), (1, n)):
            axis = "col"
        elif shape == (m, 1):
            axis = "row"
        else:
            raise ConfigError(f"bias: shape must be ({n},) or (1, {n}) (one value per column) or ({m}, 1) (one per "
                              f"row), shared by every problem of a batch; got {shape}")
        _unit_along(arr, 0 if axis == "row" else len(shape) - 1, "bias")
        vec = arr
    kb = _blocks(k)
    kinda = kindb = None
    a = b = None
    if scale_a is not None:
        kinda, a = _scale("scale_a", scale_a, ((m,), (m, 1)), (m, kb), convert)
    if scale_b is not None:
        kindb, b = _scale("scale_b", scale_b, ((n,), (1, n)), (kb, _blocks(n)), convert)
    # a vector or one-element shape that is also the block shape (K <= 128; M = 1 or N <= 128) is blockwise when
    # the other scale is (one element alone is a per-tensor scale: the same numbers as a one-block table)
    a_mn = kinda == "block_mn"
    if a_mn:
        kinda = "block"
    if kinda == "block" and kindb in ("vector", "device") and tuple(b.shape) == (kb, _blocks(n)):
        kindb = "block"
    if kindb == "block" and kinda in ("vector", "device") and tuple(a.shape) == (m, kb):
        kinda = "block"
    row = col = block_a = block_b = device_a = device_b = None
    if "block" in (kinda, kindb):
        if (kinda, kindb) != ("block", "block"):
            raise ConfigError(f"scale_a, scale_b: blockwise scaling needs both tables, (M, ceil(K/{SCALE_BLOCK})) = "
                              f"{(m, kb)} and (ceil(K/{SCALE_BLOCK}), ceil(N/{SCALE_BLOCK})) = {(kb, _blocks(n))}")
        if in_dtype not in FP8_DTYPES:
            raise ConfigError(f"scale_a, scale_b: blockwise scaling is for fp8 inputs, got {in_dtype}")
        if batched:
            raise ConfigError("scale_a, scale_b: blockwise scaling takes one problem (2-D operands), not a batch")
        block_a, block_b = a, b
    else:
        for kind, val, name in ((kinda, a, "a"), (kindb, b, "b")):
            if kind == "tensor":
                alpha *= val
            elif kind == "device":
                device_a, device_b = (val, device_b) if name == "a" else (device_a, val)
            elif kind is not None:
                if name == "a":
                    row = val
                else:
                    col = val
    if not _finite32(alpha):   # each factor finite, their product past float32's range: inf in the kernel
        folded = ", ".join(name for name, kind in (("scale_a", kinda), ("scale_b", kindb)) if kind == "tensor")
        raise ConfigError(f"{folded}: alpha times the per-tensor scales is {alpha!r}, past the kernel's float32 "
                          f"range")
    return Epilogue(alpha=alpha, beta=beta, source=source, bias=vec, bias_axis=axis, activation=activation,
                    row_scale=row, col_scale=col, device_a=device_a, device_b=device_b, block_a=block_a,
                    block_b=block_b, block_a_mn=a_mn)
