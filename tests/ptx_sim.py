"""A tiny PTX interpreter for integer kernels (the relayout kernel, the grouped walk's unit arithmetic, and warp 0's
scan and sort of the group counts), so the CPU tests run the rendered PTX itself on a model of global and shared
memory.

It knows only the instructions such kernels use (ld.param, mov, cvt, cvta, add, sub, min, max, and, or, shl, shr,
mul.lo / mul.wide / mul.hi (unsigned), mad.lo / mad.wide, div, rem, setp (with .and / .or), selp, bra, ret, ld.global, st.global,
ld.shared, st.shared, shfl.sync up / idx over a full warp, bar.sync, with @p / @!p guards, `{ }` scopes) and raises
on anything else, so a template change that steps outside that set fails loudly rather than being misread.
Registers hold 64-bit patterns; each instruction reads and writes them at its type's width.

Each thread runs on its own until it reaches a shuffle or a barrier, where it waits: a shuffle completes when all
32 lanes of its warp wait at that same shuffle (a warp whose lanes wait at different ones is an error, as the
full-warp mask makes it on the GPU), a bar.sync when every thread of the CTA still running waits at one.
"""
from __future__ import annotations

import re

_MASK64 = (1 << 64) - 1
_WIDTH = {"8": 8, "16": 16, "32": 32, "64": 64}
_RE_TYPE = re.compile(r"^[bsu](8|16|32|64)$")


class SimError(AssertionError):
    pass


def _bits(t: str) -> int:
    m = _RE_TYPE.match(t)
    if not m:
        raise SimError(f"unsupported type .{t}")
    return _WIDTH[m.group(1)]


def _signed(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


class Kernel:
    """One `.entry` of a PTX module, parsed once; `run` executes a grid of it."""

    def __init__(self, ptx: str, entry: str):
        ptx = re.sub(r"//[^\n]*", "", ptx)  # comments may hold anything, parentheses included
        m = re.search(r"\.entry\s+" + re.escape(entry) + r"\s*\((.*?)\)(.*?)\{(.*)\n\}", ptx, re.S)
        if not m:
            raise SimError(f"entry {entry!r} not found")
        self.params = re.findall(r"\.param\s+\.(\w+)\s+(\w+)", m.group(1))
        self.globals = {name: int(size) for name, size in re.findall(r"\.global\s+.*?\.b8\s+(\w+)\[(\d+)\]", ptx)}
        self.code: list[tuple] = []
        self.labels: dict[str, int] = {}
        for raw in m.group(3).splitlines():
            line = raw.strip()
            if not line or line.startswith(".") or line in ("{", "}"):
                continue
            if re.fullmatch(r"\w+:", line):
                self.labels[line[:-1]] = len(self.code)
                continue
            guard = None
            if line.startswith("@"):
                g, line = line.split(None, 1)
                guard = (g[1:].startswith("!"), g.lstrip("@!"))
            op, _, rest = line.rstrip(";").partition(" ")
            operands = [o.strip() for o in re.split(r",(?![^\[]*\])", rest)] if rest.strip() else []
            self.code.append((guard, op.split("."), operands, raw.strip()))
        self.executed = 0

    def run(self, grid: int, block: int, args: list[int], memory: "Memory", shared=None) -> None:
        """`shared`: the CTA's shared memory, a read-only Memory (ld.shared only) or a Scratch (read and written);
        one object serves every CTA of the grid, in turn."""
        if len(args) != len(self.params):
            raise SimError(f"{len(self.params)} parameters, {len(args)} arguments")
        params = {name: a & _MASK64 for (_, name), a in zip(self.params, args)}
        for cta in range(grid):
            threads = {tid: self._thread(cta, tid, grid, block, params, memory, shared) for tid in range(block)}
            waiting: dict[int, tuple] = {}
            for tid, thread in threads.items():
                self._resume(thread, tid, None, waiting)
            while waiting:
                self._sync(threads, waiting, block, cta)

    @staticmethod
    def _resume(thread, tid: int, result, waiting: dict) -> None:
        """Run one thread to its next shuffle or barrier (recorded in `waiting`) or to its end."""
        try:
            waiting[tid] = thread.send(result)
        except StopIteration:
            pass

    def _sync(self, threads: dict, waiting: dict, block: int, cta: int) -> None:
        """Complete every full warp's shuffle, or else one CTA barrier; anything else is a hang on the GPU."""
        done = False
        for first in range(0, block, 32):
            lanes = list(range(first, min(first + 32, block)))
            requests = [waiting.get(t) for t in lanes]
            if any(r is None or r[0] != "shfl" for r in requests):
                continue
            if len(lanes) != 32 or len({r[1] for r in requests}) != 1:
                raise SimError(f"cta {cta}, warp {first // 32}: lanes wait at different shuffles")
            mode, sources = requests[0][2], [r[3] for r in requests]
            for lane, (t, r) in enumerate(zip(lanes, requests)):
                b, c = r[4], r[5]
                if mode == "up" and c == 0:
                    result = (sources[lane - b], 1) if lane - b >= 0 else (sources[lane], 0)
                elif mode == "idx" and c == 31:
                    result = (sources[b & 31], 1)
                else:
                    raise SimError(f"shfl.sync.{mode} with clamp {c} is not modelled")
                del waiting[t]
                self._resume(threads[t], t, result, waiting)
            done = True
        if done:
            return
        if all(r[0] == "bar" for r in waiting.values()):
            for t in list(waiting):   # every thread still running waits at a barrier
                del waiting[t]
                self._resume(threads[t], t, None, waiting)
            return
        raise SimError(f"cta {cta}: threads wait at a barrier while others wait at a shuffle of a partial warp: "
                       f"{sorted(set((r[0], r[1]) for r in waiting.values()))}")

    def _thread(self, cta, tid, grid, block, params, memory, shared):
        """One thread, as a generator: it yields ("shfl", pc, mode, value, b, c) at a shuffle and receives (the
        value, the predicate), and yields ("bar", pc) at a barrier."""
        regs: dict[str, int] = {}
        special = {"%ctaid.x": cta, "%tid.x": tid, "%nctaid.x": grid, "%ntid.x": block}

        def value(operand: str) -> int:
            if operand in regs:
                return regs[operand]
            if operand in special:
                return special[operand]
            if re.fullmatch(r"-?\d+", operand):
                return int(operand) & _MASK64
            if re.fullmatch(r"0x[0-9a-fA-F]+", operand):
                return int(operand, 16)
            raise SimError(f"read of unset register or unknown operand {operand}")

        def address(operand: str) -> str:
            if not (operand.startswith("[") and operand.endswith("]")):
                raise SimError(f"not an address operand: {operand}")
            return operand[1:-1].strip()

        def address_sum(operand: str) -> int:
            """The address [reg], [imm] or [reg+imm] names."""
            return sum(value(x.strip()) for x in address(operand).split("+")) & _MASK64

        pc, steps = 0, 0
        while pc < len(self.code):
            guard, op, ops, text = self.code[pc]
            pc += 1
            steps += 1
            if steps > 10_000_000:
                raise SimError("runaway thread")
            if guard is not None:
                negate, pred = guard
                if pred not in regs:
                    raise SimError(f"unset predicate {pred}: {text}")
                if bool(regs[pred]) == negate:
                    continue
            name = op[0]
            try:
                if name == "ret":
                    break
                if name == "bra":
                    pc = self.labels[ops[0]]
                elif name == "ld" and op[1] == "param":
                    regs[ops[0]] = params[address(ops[1])]
                elif name == "ld" and op[1] == "global":
                    bits = _bits(op[-1])
                    regs[ops[0]] = memory.load(address_sum(ops[1]), bits // 8)
                elif name == "ld" and op[1] == "shared":
                    if shared is None:
                        raise SimError("a shared-memory load, and no shared memory given")
                    bits = _bits(op[-1])
                    regs[ops[0]] = shared.load(address_sum(ops[1]), bits // 8)
                elif name == "st" and op[1] in ("global", "shared"):
                    bits = _bits(op[-1])
                    target = memory if op[1] == "global" else shared
                    if target is None:
                        raise SimError("a shared-memory store, and no shared memory given")
                    target.store(address_sum(ops[0]), bits // 8, value(ops[1]) & ((1 << bits) - 1))
                elif name == "shfl":
                    if value(ops[4]) != 0xFFFFFFFF:
                        raise SimError("a shuffle of part of a warp is not modelled")
                    dest, _, pred = ops[0].partition("|")
                    got, ok = yield ("shfl", pc, op[2], value(ops[1]) & 0xFFFFFFFF, value(ops[2]), value(ops[3]))
                    regs[dest] = got
                    if pred:
                        regs[pred] = ok
                elif name == "bar" and op[1] == "sync":
                    yield ("bar", pc)
                elif name == "mov":
                    src = ops[1]
                    regs[ops[0]] = memory.symbol(src) if src in self.globals else value(src)
                elif name == "cvta":
                    regs[ops[0]] = value(ops[1])
                elif name == "cvt":
                    dst_t, src_t = op[1], op[2]
                    v = value(ops[1]) & ((1 << _bits(src_t)) - 1)
                    if src_t.startswith("s"):
                        v = _signed(v, _bits(src_t))
                    regs[ops[0]] = v & ((1 << _bits(dst_t)) - 1)
                elif name in ("add", "sub"):
                    bits = _bits(op[-1])
                    a, b = value(ops[1]), value(ops[2])
                    r = a + b if name == "add" else a - b
                    regs[ops[0]] = r & ((1 << bits) - 1)
                elif name in ("and", "or", "shl", "shr") and op[-1][0] in "bu":
                    bits = _bits(op[-1])
                    a, b = value(ops[1]) & ((1 << bits) - 1), value(ops[2])
                    r = {"and": lambda: a & b, "or": lambda: a | b, "shl": lambda: a << b if b < bits else 0,
                         "shr": lambda: a >> b if b < bits else 0}[name]()
                    regs[ops[0]] = r & ((1 << bits) - 1)
                elif name in ("min", "max"):
                    bits = _bits(op[-1])
                    a, b = value(ops[1]) & ((1 << bits) - 1), value(ops[2]) & ((1 << bits) - 1)
                    if op[-1].startswith("s"):
                        a, b = _signed(a, bits), _signed(b, bits)
                    regs[ops[0]] = (min(a, b) if name == "min" else max(a, b)) & ((1 << bits) - 1)
                elif name == "selp":
                    regs[ops[0]] = value(ops[1]) if regs[ops[3]] else value(ops[2])
                elif name == "mul" and op[1] == "wide":
                    bits = _bits(op[2])
                    a, b = value(ops[1]) & ((1 << bits) - 1), value(ops[2]) & ((1 << bits) - 1)
                    if op[2].startswith("s"):
                        a, b = _signed(a, bits), _signed(b, bits)
                    regs[ops[0]] = (a * b) & ((1 << (2 * bits)) - 1)
                elif name == "mad" and op[1] == "wide":
                    bits = _bits(op[2])
                    if op[2].startswith("s"):
                        raise SimError("a signed mad.wide is not modelled")
                    a, b = value(ops[1]) & ((1 << bits) - 1), value(ops[2]) & ((1 << bits) - 1)
                    regs[ops[0]] = (a * b + value(ops[3])) & ((1 << (2 * bits)) - 1)
                elif name == "mul" and op[1] == "hi" and op[2].startswith("u"):
                    bits = _bits(op[2])
                    a, b = value(ops[1]) & ((1 << bits) - 1), value(ops[2]) & ((1 << bits) - 1)
                    regs[ops[0]] = (a * b) >> bits
                elif name in ("mul", "mad") and op[1] == "lo":
                    bits = _bits(op[2])
                    r = value(ops[1]) * value(ops[2]) + (value(ops[3]) if name == "mad" else 0)
                    regs[ops[0]] = r & ((1 << bits) - 1)
                elif name in ("div", "rem"):
                    if not op[1].startswith("u"):
                        raise SimError("signed division is not modelled")
                    bits = _bits(op[1])
                    a, b = value(ops[1]) & ((1 << bits) - 1), value(ops[2]) & ((1 << bits) - 1)
                    if b == 0:
                        raise SimError(f"division by zero: {text}")
                    regs[ops[0]] = a // b if name == "div" else a % b
                elif name == "setp":
                    cmp, t = op[1], op[-1]
                    bits = _bits(t)
                    a, b = value(ops[1]) & ((1 << bits) - 1), value(ops[2]) & ((1 << bits) - 1)
                    if t.startswith("s"):
                        a, b = _signed(a, bits), _signed(b, bits)
                    r = {"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b, "eq": a == b, "ne": a != b}[cmp]
                    if len(op) == 4:                 # setp.cmp.and.type d, a, b, c: d = (a cmp b) and c (or: or c)
                        if op[2] not in ("and", "or"):
                            raise SimError(f"combinator .{op[2]} is not modelled")
                        r = (r and bool(regs[ops[3]])) if op[2] == "and" else (r or bool(regs[ops[3]]))
                    regs[ops[0]] = r
                else:
                    raise SimError("instruction not modelled")
            except SimError as e:
                raise SimError(f"{e} (cta {cta}, thread {tid}: {text})") from None
            self.executed += 1


class Scratch:
    """Shared memory as bytes that the kernel reads and writes: `initial` (byte address -> value) and every store
    since; a load of a byte never written fails the run, a store may overwrite."""

    def __init__(self, initial: dict[int, int] | None = None):
        self.bytes = dict(initial or {})

    def load(self, addr: int, size: int) -> int:
        if addr % size:
            raise SimError(f"unaligned shared load of {size} bytes at 0x{addr:x}")
        if any(addr + i not in self.bytes for i in range(size)):
            raise SimError(f"shared load from 0x{addr:x}, never written")
        return sum(self.bytes[addr + i] << (8 * i) for i in range(size))

    def store(self, addr: int, size: int, value: int) -> None:
        if addr % size:
            raise SimError(f"unaligned shared store of {size} bytes at 0x{addr:x}")
        for i in range(size):
            self.bytes[addr + i] = (value >> (8 * i)) & 0xFF

    def u32(self, addr: int) -> int:
        return self.load(addr, 4)


class Memory:
    """Global memory as bytes: a map of readable byte address -> value and the set of byte addresses a kernel may
    write. A read of a byte outside the readable map, a write outside the writable set, an access not aligned to
    its size or a second write to a byte fails the run. Values are little-endian, as on the GPU."""

    def __init__(self, readable: dict[int, int], writable: set[int], symbols: dict[str, int]):
        self.readable = readable
        self.writable = writable
        self.symbols = symbols
        self.written: dict[int, int] = {}
        self.accesses: dict[str, set[int]] = {"load": set(), "store": set()}   # access sizes seen

    def symbol(self, name: str) -> int:
        return self.symbols[name]

    def load(self, addr: int, size: int) -> int:
        self.accesses["load"].add(size)
        if addr % size:
            raise SimError(f"unaligned load of {size} bytes at 0x{addr:x}")
        value = 0
        for i in range(size):
            if addr + i not in self.readable:
                raise SimError(f"load from 0x{addr + i:x}, outside the source")
            value |= self.readable[addr + i] << (8 * i)
        return value

    def store(self, addr: int, size: int, value: int) -> None:
        self.accesses["store"].add(size)
        if addr % size:
            raise SimError(f"unaligned store of {size} bytes at 0x{addr:x}")
        for i in range(size):
            if addr + i not in self.writable:
                raise SimError(f"store to 0x{addr + i:x}, outside the destination")
            if addr + i in self.written:
                raise SimError(f"second store to 0x{addr + i:x}")
            self.written[addr + i] = (value >> (8 * i)) & 0xFF
