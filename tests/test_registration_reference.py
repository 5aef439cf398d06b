"""docs/reference.md has a row for every keyword of fastvec's vector envs (in the class's section)
and every ``vector_kwargs`` key ``make_vec(..., vectorization_mode="fastvec")`` takes, read from
the constructors' signatures, so the page cannot fall behind the code."""
from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from fastvec import FastVectorEnv, MultiAgentVectorEnv, NativeVectorEnv
from fastvec.vector._caller import backend_choice

REFERENCE = Path(__file__).resolve().parent.parent / "docs" / "reference.md"


def _section(heading: str) -> str:
    """The text of the page's section whose ``## `` heading starts with ``heading``."""
    text = REFERENCE.read_text(encoding="utf-8")
    assert f"\n## {heading}" in text, f"docs/reference.md has no section '## {heading}...'"
    return text.split(f"\n## {heading}", 1)[1].split("\n## ", 1)[0]


def _documented(text: str) -> set[str]:
    """The names in the first column of ``text``'s tables (`name`, `**name`, `a`, `b`): one row each."""
    names = set()
    for line in text.splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            names.update(re.findall(r"`\**([A-Za-z_][A-Za-z0-9_]*)`", line.split("|")[1]))
    return names


def _keywords(cls: type) -> list[str]:
    return [name for name in inspect.signature(cls.__init__).parameters if name != "self"]


def _ray_vector_env() -> type:
    pytest.importorskip("ray")
    from fastvec.ray import RayVectorEnv

    return RayVectorEnv


@pytest.mark.parametrize("cls", [FastVectorEnv, MultiAgentVectorEnv, NativeVectorEnv, "RayVectorEnv"],
                         ids=lambda c: c if isinstance(c, str) else c.__name__)
def test_every_constructor_keyword_is_in_the_reference(cls):
    if cls == "RayVectorEnv":
        cls = _ray_vector_env()
    documented = _documented(_section(f"`{cls.__name__}("))
    missing = [name for name in _keywords(cls) if name not in documented]
    assert not missing, f"docs/reference.md does not document {cls.__name__}'s keywords {missing}"


def test_every_make_vec_vector_kwargs_key_is_in_the_reference():
    from fastvec.registration import _RAY_OWN_ARGUMENTS

    keys = (backend_choice.keywords(FastVectorEnv, exclude=("env_fns",)) | set(backend_choice.NATIVE_VECTOR_KWARGS)
            | {"native", "backend"})
    try:
        from fastvec.ray import RayVectorEnv
    except ImportError:  # (Ray is optional: without it, its keys go unchecked)
        pass
    else:
        keys |= backend_choice.keywords(RayVectorEnv, exclude=_RAY_OWN_ARGUMENTS)
    missing = sorted(keys - _documented(_section("`gym.make_vec(")))
    assert not missing, f"docs/reference.md's make_vec section does not list the vector_kwargs {missing}"
