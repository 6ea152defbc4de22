"""Where and in what precision a training runs: `[train] device`, `dtype`,
`gradient_checkpointing` and `[train.lora]`, resolved once into a `TrainRuntime` the trainer
adapters (models/trainer.py, grpo.py, dpo.py) take.

    resolve_precision("auto", "auto")  # a CUDA machine: Precision(device="cuda", dtype="bfloat16")
    resolve_precision("auto", "auto")  # CPU only: Precision(device="cpu", dtype="float32")

`auto` picks bfloat16 on CUDA (the precision current GPUs train in) and float32 on the CPU
(the tiny demo's precision; CPU bfloat16 is slower there and rounds the chaotic tiny training
differently). The model is loaded in the training dtype and the checkpoint saved in it, except
that full float16 training keeps float32 master weights (a gradient scaler cannot unscale float16
gradients) and casts to float16 when it saves.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from configs import TrainConfig

Device = Literal["cpu", "cuda"]
DType = Literal["float32", "bfloat16", "float16"]
DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("auto", "float32", "bfloat16", "float16")
# A Linux machine with none of these has no GPU driver, so torch sees no CUDA device: NVIDIA's
# driver, AMD's ROCm (torch.cuda on HIP) and WSL2's GPU bridge.
GPU_DRIVER_PATHS = ("/proc/driver/nvidia", "/dev/nvidiactl", "/dev/kfd", "/dev/dxg")


@dataclass(frozen=True)
class Precision:
    """The resolved device and dtype of a training."""

    device: Device = "cpu"
    dtype: DType = "float32"


@dataclass(frozen=True)
class LoraSettings:
    """`[train.lora]` of an enabled LoRA: each pass trains an adapter and saves it merged."""

    rank: int
    alpha: float
    dropout: float
    target_modules: str | tuple[str, ...]


@dataclass(frozen=True)
class TrainRuntime:
    """How a trainer adapter runs; the default is float32 on the CPU, full fine-tuning."""

    precision: Precision = field(default_factory=Precision)
    gradient_checkpointing: bool = False
    lora: LoraSettings | None = None
    num_processes: int = 1  # processes of one training (accelerate launch); batches split over them


def resolve_precision(device: str, dtype: str, *, cuda_available: bool | None = None
                      ) -> Precision:
    """The device and dtype a training runs in, from `[train] device` and `dtype`.

    Parameters
    ----------
    device
        "auto" (cuda when torch sees a GPU, else cpu), "cpu" or "cuda".
    dtype
        "auto" (bfloat16 on cuda, float32 on cpu), "float32", "bfloat16" or "float16".
    cuda_available
        Whether a CUDA device is usable; None asks `torch.cuda.is_available()` (only when
        `device` is "auto" or "cuda").

    Returns
    -------
    Precision

    Raises
    ------
    ValueError
        An unknown value, "cuda" without a usable GPU, or float16 on the CPU.
    """
    if device not in DEVICES or dtype not in DTYPES:
        msg = (f"train.device = {device!r}, train.dtype = {dtype!r}: device must be one of "
               f"{DEVICES} and dtype one of {DTYPES}")
        raise ValueError(msg)
    if device != "cpu" and cuda_available is None:
        cuda_available = cuda_usable()
    if device == "cuda" and not cuda_available:
        msg = ("train.device = 'cuda' but torch sees no CUDA device (torch.cuda.is_available() "
               "is False); set train.device = 'auto' or 'cpu', or install a CUDA build of torch")
        raise ValueError(msg)
    resolved: Device = "cuda" if device == "cuda" or (device == "auto" and cuda_available) \
        else "cpu"
    chosen = dtype if dtype != "auto" else "bfloat16" if resolved == "cuda" else "float32"
    if chosen == "float16" and resolved == "cpu":
        msg = ("train.dtype = 'float16' needs a CUDA device (it trains with a gradient scaler); "
               "use 'bfloat16' or 'float32' on the CPU")
        raise ValueError(msg)
    return Precision(device=resolved, dtype=chosen)


def cuda_usable(driver_paths: tuple[str, ...] = GPU_DRIVER_PATHS) -> bool:
    """`torch.cuda.is_available()`, without importing torch (2-3 s) on a Linux machine with no
    GPU driver: a resumed run that recomputes nothing, or one that trains on the CPU, needs no
    torch to resolve `device = "auto"`. Once torch is imported, torch is asked."""
    if ("torch" not in sys.modules and sys.platform.startswith("linux")
            and not any(Path(p).exists() for p in driver_paths)):
        return False
    import torch

    return torch.cuda.is_available()


def train_runtime(train: TrainConfig) -> TrainRuntime:
    """The runtime of the run's `[train]` section: its precision resolved on this machine."""
    lora = train.lora
    settings = (LoraSettings(rank=lora.rank, alpha=lora.alpha, dropout=lora.dropout,
                             target_modules=lora.target_modules
                             if isinstance(lora.target_modules, str)
                             else tuple(lora.target_modules))
                if lora.enabled else None)
    return TrainRuntime(precision=resolve_precision(train.device, train.dtype),
                        gradient_checkpointing=train.gradient_checkpointing, lora=settings,
                        num_processes=train.num_processes)


def check_runtime(train: TrainConfig, *, gpus: int | None = None) -> TrainRuntime:
    """Check, before a run starts, that this machine can train as `[train]` asks.

    Parameters
    ----------
    train
        The run's `[train]` section.
    gpus
        CUDA devices torch sees; None asks `torch.cuda.device_count()` (only on cuda).

    Returns
    -------
    TrainRuntime
        The runtime the train stage will use.

    Raises
    ------
    ValueError
        One line naming the key and the fix: no GPU for `device`, float16 on the CPU, LoRA
        without peft, more processes than GPUs.
    """
    import importlib.util

    runtime = train_runtime(train)
    if runtime.lora is not None and importlib.util.find_spec("peft") is None:
        msg = "train.lora.enabled = true needs peft; install it (pip install 'peft>=0.21,<0.22')"
        raise ValueError(msg)
    n = runtime.num_processes
    if n > 1 and runtime.precision.device == "cuda":
        if gpus is None:
            import torch

            gpus = torch.cuda.device_count()
        if gpus < n:
            msg = (f"train.num_processes = {n} but torch sees {gpus} CUDA devices; set "
                   f"train.num_processes <= {gpus} (one process per GPU)")
            raise ValueError(msg)
    return runtime


def torch_dtype(name: str) -> Any:
    """The torch dtype called `name` ("float32", "bfloat16", "float16")."""
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def weights_dtype(runtime: TrainRuntime) -> str:
    """The dtype the trained model is loaded in: the training dtype, except float32 master
    weights for a full float16 training (its gradient scaler cannot unscale float16 gradients;
    under LoRA the frozen base is float16 and peft keeps the adapter in float32)."""
    if runtime.precision.dtype == "float16" and runtime.lora is None:
        return "float32"
    return runtime.precision.dtype


def precision_arguments(runtime: TrainRuntime) -> dict[str, Any]:
    """The TrainingArguments of the runtime's device, mixed precision and checkpointing."""
    dtype = runtime.precision.dtype
    return {
        "use_cpu": runtime.precision.device == "cpu",
        "bf16": dtype == "bfloat16",
        "fp16": dtype == "float16",
        "gradient_checkpointing": runtime.gradient_checkpointing,
        # non-reentrant checkpointing needs no inputs that require grad (a frozen LoRA base)
        **({"gradient_checkpointing_kwargs": {"use_reentrant": False}}
           if runtime.gradient_checkpointing else {}),
    }
