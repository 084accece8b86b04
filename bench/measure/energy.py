"""Energy where the hardware reports it: RAPL through powercap on CPUs, NVML on NVIDIA GPUs.

A meter reads cumulative counters at the start and the end of a span and returns
joules with the source of every figure. Where nothing is readable it says "not
measured" (joules None), never zero. Scope, stated in the result: RAPL counts a CPU
package's energy, every process on it included (so one rank per host reads it);
NVML counts one GPU's (each rank reads its own). Counters wrap at their range; one
wrap per span is undone (a span far shorter than a wrap, minutes at full power).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

POWERCAP = "/sys/class/powercap"
ROOT_VARIABLE = "BENCH_POWERCAP_ROOT"  # another powercap root (tests point it at a fake tree)
NOT_MEASURED = "not measured"


def _powercap_root() -> Path:
    return Path(os.environ.get(ROOT_VARIABLE) or POWERCAP)


def rapl_packages() -> list[Path]:
    """The top-level RAPL domains (one per CPU package) whose counters this user can read."""
    root = _powercap_root()
    out = []
    for d in sorted(root.glob("intel-rapl:*")):
        if d.name.count(":") != 1:  # intel-rapl:0:1 is a sub-domain of package 0
            continue
        try:
            int((d / "energy_uj").read_text())
            int((d / "max_energy_range_uj").read_text())
        except (OSError, ValueError):
            continue
        out.append(d)
    return out


def _read_uj(d: Path) -> int:
    return int((d / "energy_uj").read_text())


@dataclasses.dataclass
class Meter:
    """Counters read at `start()`; `stop()` gives joules and where they came from."""

    packages: bool = True  # read the host's RAPL packages (one rank per host)
    gpu_index: int | None = None  # read this NVML device
    _rapl: dict[Path, int] = dataclasses.field(default_factory=dict)
    _nvml_mj: int | None = None

    def start(self) -> None:
        if self.packages:
            for d in rapl_packages():
                try:
                    self._rapl[d] = _read_uj(d)
                except (OSError, ValueError):
                    continue
        if self.gpu_index is not None:
            self._nvml_mj = _nvml_energy_mj(self.gpu_index)

    def stop(self) -> list[dict[str, Any]]:
        """Joules over the span, one part per counter with its source and scope; [] when
        nothing was readable."""
        parts = []
        for d, before in self._rapl.items():
            try:
                after, wrap = _read_uj(d), int((d / "max_energy_range_uj").read_text())
            except (OSError, ValueError):
                continue
            delta = after - before if after >= before else after + wrap - before
            parts.append(
                {
                    "joules": delta / 1e6,
                    "source": f"rapl:{d}",
                    "scope": "CPU package (every process on it)",
                }
            )
        if self.gpu_index is not None and self._nvml_mj is not None:
            after_mj = _nvml_energy_mj(self.gpu_index)
            if after_mj is not None:
                parts.append(
                    {
                        "joules": (after_mj - self._nvml_mj) / 1e3,
                        "source": f"nvml:gpu{self.gpu_index}",
                        "scope": "one GPU",
                    }
                )
        return parts


def total(per_rank: list[Any], hosts: list[str], seconds: float | None) -> dict[str, Any]:
    """A run's energy from every rank's parts: a CPU package once per host (RAPL counts every
    process on it; namespaces share a host name, so one machine counts once), every GPU.
    Null joules and "not measured" where nothing reported, never zero."""
    joules, sources, scope, seen = 0.0, [], set(), set()
    for parts, host in zip(per_rank, hosts, strict=False):
        for part in parts if isinstance(parts, list) else []:
            key = (host, part["source"])
            if key in seen:
                continue
            seen.add(key)
            joules += float(part["joules"])
            sources.append(f"{host}:{part['source']}")
            scope.add(part["scope"])
    if not sources:
        return {"joules": None, "watts": None, "seconds": seconds, "sources": [NOT_MEASURED]}
    watts = joules / seconds if seconds else None
    return {
        "joules": joules,
        "watts": watts,
        "seconds": seconds,
        "sources": sources,
        "scope": sorted(scope),
    }


def _nvml_energy_mj(index: int) -> int | None:
    """NVML's total energy counter of device `index` in mJ (Volta and later); None if absent."""
    try:
        import pynvml  # nvidia-ml-py: optional, present on GPU machines that install it
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        return int(pynvml.nvmlDeviceGetTotalEnergyConsumption(handle))
    except Exception:  # any NVML error (no driver, unsupported GPU): not measured
        return None
