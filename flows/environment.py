"""Environment defaults of a run, set before torch, transformers or Prefect are imported;
anything the user already set wins.

`ATEN_CPU_CAPABILITY=avx2` and `MKL_CBWR=AVX2` pin PyTorch's CPU kernels and MKL to their AVX2
code paths. The tiny model's training is chaotic: an AVX-512 machine rounds differently, and
after a thousand steps the held-out accuracies differ by several points. With both pinned, the
same config gives the same table on AMD EPYC machines with and without AVX-512 (the default demo
took about the same time either way); an Intel Xeon still rounds its own way (docs/history.md).
Unset them (or set `default`) for the widest kernels.
"""

from __future__ import annotations

import os

MODEL_DEFAULTS = {
    "HF_HUB_OFFLINE": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "TOKENIZERS_PARALLELISM": "false",
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_CBWR": "AVX2",
}
CLI_DEFAULTS = {
    **MODEL_DEFAULTS,
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_LOGGING_LEVEL": "WARNING",
    "PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW": "ignore",
}


def set_defaults(defaults: dict[str, str] = MODEL_DEFAULTS) -> None:
    """Set each variable of `defaults` that the environment does not set already."""
    for key, value in defaults.items():
        os.environ.setdefault(key, value)
