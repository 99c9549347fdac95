#!/usr/bin/env python3
"""A first look at a new kernel build on the GPU: a few shapes in debug mode (bounded barrier waits that name the
stalled barrier), then the same shapes in the normal build. Prints one line per case; exits non-zero on any
failure. Meant to run under `timeout` before the full GPU suite."""
from __future__ import annotations

import sys

import numpy as np

from ptxgemm.accuracy import check, random_matrix, reference

SHAPES = ((128, 128, 64), (256, 256, 128), (1000, 520, 264), (129, 136, 72), (8448, 9216, 256))


def main() -> int:
    import ptxgemm
    from ptxgemm.runtime.debug import BarrierStall

    rng = np.random.default_rng(0)
    failures = 0
    for debug, cluster_m in ((True, 1), (True, 2), (False, 1), (False, 2)):
        for b_major in ("mn", "k"):
            for m, n, k in SHAPES:
                a = random_matrix(rng, m, k, "bfloat16")
                b = random_matrix(rng, k, n, "bfloat16", order="C" if b_major == "mn" else "F")
                try:
                    out = ptxgemm.run(a, b, config=ptxgemm.GemmConfig(debug=debug, cluster_m=cluster_m))
                except BarrierStall as e:
                    print(f"STALL debug={debug} cluster={cluster_m} B {b_major}-major {m}x{n}x{k}: {e}", flush=True)
                    return 3
                verdict = check(out, *reference(a, b), k)
                failures += not verdict.ok
                print(f"{'ok  ' if verdict.ok else 'FAIL'} debug={debug} cluster={cluster_m} B {b_major}-major "
                      f"{m}x{n}x{k}: {verdict}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
