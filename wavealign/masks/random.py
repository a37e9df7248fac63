"""Random controls, ignoring Q/K: ``random`` keeps every block independently with probability ``density``
(iid Bernoulli, binomial row NNZ, the paper's random control); ``random-fixed-nnz`` gives each row a set NNZ
(``density * NB`` scaled per row by U(1 - nnz_spread, 1 + nnz_spread)), a lock-step control whose rows all
finish together, so Stage 2 has nothing to align.

Both are ``wavealign.masks.synthetic``'s generators, so a seed gives the same mask there and here.
"""

from __future__ import annotations

from functools import partial

from wavealign import masks
from wavealign.blockmask import check_seed
from wavealign.masks import synthetic
from wavealign.masks._common import check_fraction, check_number

masks.register("random", None, {"density": 0.25, "seed": 0},
               "iid Bernoulli blocks at a given density, binomial row NNZ (control)",
               from_shape=synthetic.random_mask, checks={"density": check_fraction, "seed": check_seed})
masks.register("random-fixed-nnz", None, {"density": 0.25, "nnz_spread": 0.0, "seed": 0},
               "random columns with a set row NNZ (lock-step control)",
               from_shape=synthetic.fixed_nnz_mask,
               checks={"density": check_fraction, "seed": check_seed,
                       "nnz_spread": partial(check_number, lo=0.0, hi=1.0, hi_open=True)})

if __name__ == "__main__":
    from wavealign.masks._draw import main

    raise SystemExit(main("random"))
