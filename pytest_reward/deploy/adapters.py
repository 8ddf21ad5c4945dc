"""Adapters from reward functions to the call conventions of RL trainers: the names generated bundles import.

Each trainer's adapter lives in its module (:mod:`pytest_reward.trainers.trl`, ``.verl``, ``.openrlhf``,
``.slime``), what they share in :mod:`pytest_reward.trainers.adapter` (the calling convention, weighted rows,
pickling); here is :class:`BundleSource`, which loads a bundle (``deploy.runtime``) so that an adapter of a bundle
pickles as the bundle's path, and every name this module has always offered.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import BundleError
from ..reward.chat import conversation, response_from_query
from ..trainers.adapter import call_reward, flat_scores, is_valid, rebuild, result_json
from ..trainers.openrlhf import OpenRLHFRewardFunc, make_openrlhf_reward_func, openrlhf_answer
from ..trainers.slime import SlimeCustomRM, make_slime_custom_rm
from ..trainers.trl import GROUND_TRUTH_KEYS, TRL_INJECTED, TrlReward, TrlRewardAsync, make_trl_reward
from ..trainers.verl import VERL_INJECTED, VerlComputeScore, make_verl_compute_score

if TYPE_CHECKING:
    from .runtime import LoadedBundle

__all__ = [
    "GROUND_TRUTH_KEYS",
    "TRL_INJECTED",
    "VERL_INJECTED",
    "BundleSource",
    "OpenRLHFRewardFunc",
    "SlimeCustomRM",
    "TrlReward",
    "TrlRewardAsync",
    "VerlComputeScore",
    "call_reward",
    "conversation",
    "flat_scores",
    "is_valid",
    "make_openrlhf_reward_func",
    "make_slime_custom_rm",
    "make_trl_reward",
    "make_verl_compute_score",
    "openrlhf_answer",
    "response_from_query",
    "result_json",
]

#: What adapters pickled before the trainers' modules held them unpickle with.
_rebuild = rebuild


@dataclass(frozen=True)
class BundleSource:
    """Where a bundle's adapters come from: its package directory (absolute), name and content hash."""

    package_dir: str
    name: str
    content_hash: str

    @classmethod
    def of(cls, package: Any) -> BundleSource:
        """The source of an imported bundle package (its ``__file__`` and ``MANIFEST``)."""
        return cls(
            str(Path(package.__file__).resolve().parent),
            str(package.MANIFEST["name"]),
            str(package.MANIFEST["content_hash"]),
        )

    def load(self) -> LoadedBundle:
        """Import the bundle from its path (once per interpreter; ``runtime.load_bundle`` checks every file)."""
        from .runtime import load_bundle

        if not os.path.isdir(self.package_dir):
            raise BundleError(
                f"cannot load reward bundle {self.name}: {self.package_dir} does not exist here (a pickled adapter "
                "loads its bundle from the absolute path it was loaded from: put the bundle at the same path on "
                "every machine, e.g. on a shared filesystem)"
            )
        bundle = load_bundle(self.package_dir)
        if bundle.manifest.get("content_hash") != self.content_hash:
            raise BundleError(
                f"{self.package_dir}: holds reward bundle {bundle.name} with content hash "
                f"{str(bundle.manifest.get('content_hash'))[:16]}, not the {self.content_hash[:16]} this adapter "
                "was built from"
            )
        return bundle
