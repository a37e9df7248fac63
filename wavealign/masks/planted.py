"""``planted``: rows copied from a few random prototype K/V sets, with noise, then shuffled, ignoring Q/K.

A control with known structure: a reorder that finds the prototypes recovers locality the shuffle
destroyed. It is ``wavealign.masks.synthetic.planted_mask``, so a seed gives the same mask there and here.
"""

from __future__ import annotations

from functools import partial

from wavealign import masks
from wavealign.blockmask import check_int, check_seed
from wavealign.masks import synthetic
from wavealign.masks._common import check_flag, check_fraction, check_number

masks.register("planted", None, {"density": 0.25, "prototypes": 8, "noise": 0.02, "shuffle": True, "seed": 0},
               "rows from a few random prototypes, noised and shuffled (control with known structure)",
               from_shape=synthetic.planted_mask,
               checks={"density": check_fraction, "seed": check_seed,
                       "prototypes": partial(check_int, lo=1, hi=synthetic.MAX_PROTOTYPES), "shuffle": check_flag,
                       "noise": partial(check_number, lo=0.0, hi=0.5, hi_open=True)})

if __name__ == "__main__":
    from wavealign.masks._draw import main

    raise SystemExit(main("planted"))
