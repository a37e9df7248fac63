"""Every registry entry declares the parameter schema a sweep holds its values to (``registry.param_types``): no
parameter is left to any type."""

from __future__ import annotations

import pytest

from orchestrator.grid_axes import KINDS, declared_params, entry
from wavealign import registry


def _entries() -> list[tuple[str, str]]:
    from wavealign import kernels, masks, measurers, reorderers

    names = {"method": masks.available, "backend": kernels.names, "measure": measurers.names,
             "reorderer": reorderers.names}
    return [(kind, name) for kind in KINDS for name in names[kind]()]


@pytest.mark.parametrize(("kind", "name"), _entries())
def test_every_entry_registers_a_type_for_each_parameter_a_sweep_may_set(kind, name):
    types = registry.param_types(f"{kind} {name!r}", declared_params(kind, name), entry(kind, name).types)
    assert set(types) == set(declared_params(kind, name))


def test_a_parameter_whose_default_says_no_type_must_be_given_one():
    with pytest.raises(ValueError, match=r"method 'm' params \['budget'\] have defaults of no scalar type"):
        registry.param_types("method 'm'", {"budget": None, "density": 0.5}, {})
    assert registry.param_types("method 'm'", {"budget": None}, {"budget": float | None}) == {"budget": float | None}


def test_a_type_for_a_parameter_the_entry_lacks_is_refused():
    with pytest.raises(ValueError, match=r"gives types for \['bogus'\]"):
        registry.param_types("method 'm'", {"density": 0.5}, {"bogus": int})
