"""Hand-written CPU kernels, built on first use and called from jit-compiled programs through XLA's FFI.

Four kernels (measured in bench/RESULTS.md):

- :func:`decode_attention`, the attention of one new token per row over its KV cache, which XLA's CPU backend
  runs at ~20 GB/s where the machine streams 27 GB/s on one core, and :func:`decode_attention_update`, the same
  after writing the token's key and value into the cache in place (no separate scatter of the cache);
  :func:`pytest_reward.jax.model.decode_step` calls the latter on the CPU for float32 caches.
- :func:`prefill_attention`, the causal attention of left-padded prompts (a rollout's prefill, scoring): it
  computes the scores of each position's real keys at or before it only, where XLA masks the full T x T square
  and runs the softmax and the weighted sum as separate passes (~5x faster at GPT-2-small's 8 x 256-token
  scoring); :func:`pytest_reward.jax.model.hidden_states` calls it on the CPU for float32.
- :func:`argmax_columns`, the greedy choice over a decode step's (V, B) logits in one pass, where XLA takes three
  (~1 ms per token for GPT-2's vocabulary at batch 32); :func:`pytest_reward.jax.generate.greedy_tokens` calls it.
- :func:`linear_packed`, a decode step's matmul of B activation columns by a weight matrix packed once per
  parameter set (:func:`pack_rows`): 1.1-1.75x XLA's matmul at the benchmark's widths and batches;
  :func:`pytest_reward.jax.model.decode_step` calls it for every matrix and the unembedding when
  :func:`pytest_reward.jax.model.decode_weights` packed them (the inference job does, on the CPU for float32).

On every other platform and dtype, and wherever the kernels are not available, the XLA path runs
(``jax.lax.platform_dependent`` picks per platform).

The sources (``*.cc`` and ``*.h`` here, shipped in the package) are compiled once per machine, into one library,
with the C++ compiler (``$CXX``, else ``c++``/``g++``; ``-O3 -march=native``) against jaxlib's FFI headers, into a
cache directory
(``$PYTEST_REWARD_KERNEL_CACHE``, else ``$XDG_CACHE_HOME/pytest-reward/kernels``, else
``~/.cache/pytest-reward/kernels``). The library's name carries a hash of everything its code depends on: the
sources, the jaxlib version, the compiler's version and flags, and the CPU's model and feature flags (a cache on a
shared home read from another CPU builds its own). It is written to a temporary name and renamed into place, so
processes building at once each end with a whole library. A cache directory that cannot be written, or that
another user owns or can write to (a library from there would run their code), gives way to a private temporary
one; no compiler, or a failed build, leaves the XLA path, with the reason in :func:`status`.

``PYTEST_REWARD_CPU_KERNELS=0`` turns the kernels off (read when a program is traced).
"""

from __future__ import annotations

import atexit
import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

log = logging.getLogger(__name__)

HERE = Path(__file__).parent
SOURCES = tuple(HERE / f for f in ("decode_attention.cc", "prefill_attention.cc", "argmax.cc", "linear.cc"))
HEADERS = (HERE / "parallel.h", HERE / "vmath.h")  # included by them
TARGET = "pytest_reward_decode_attention"
UPDATE_TARGET = "pytest_reward_decode_attention_update"
PREFILL_TARGET = "pytest_reward_prefill_attention"
ARGMAX_TARGET = "pytest_reward_argmax_columns"
LINEAR_TARGET = "pytest_reward_linear_packed"
TARGETS = (TARGET, UPDATE_TARGET, PREFILL_TARGET, ARGMAX_TARGET, LINEAR_TARGET)
PANEL_ROWS = 12  # rows of a weight panel (pack_rows, linear.cc)
FLAGS = ("-O3", "-march=native", "-std=c++17", "-shared", "-fPIC", "-w")
BUILD_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class KernelStatus:
    """Whether the kernels run, and where they came from or why not."""

    available: bool
    detail: str  # the library's path and whether it was built or reused, or the reason it is unavailable
    library: Path | None = None


_lock = threading.Lock()
_status: KernelStatus | None = None


def enabled_by_env() -> bool:
    return os.environ.get("PYTEST_REWARD_CPU_KERNELS", "1").strip().lower() not in ("0", "false", "no", "off")


def cache_dir() -> Path:
    if os.environ.get("PYTEST_REWARD_KERNEL_CACHE"):
        return Path(os.environ["PYTEST_REWARD_KERNEL_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pytest-reward" / "kernels"


def compiler() -> str | None:
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def _cpu_identity() -> str:
    """The CPU's model and feature flags (``-march=native`` code runs only where these match)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return f"{platform.machine()} {platform.processor()}"
    keep = [ln for ln in text.splitlines() if ln.split(":")[0].strip() in ("model name", "flags", "Features")]
    return "\n".join(sorted(set(keep)))


def _library_name(cxx: str) -> str:
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60).stdout
    key = hashlib.sha256()
    for part in (
        *(path.read_bytes() for path in SOURCES + HEADERS),
        jax.__version__,
        metadata.version("jaxlib"),
        version,
        " ".join(FLAGS),
        _cpu_identity(),
    ):
        key.update(part if isinstance(part, bytes) else part.encode())
        key.update(b"\0")
    return f"kernels-{key.hexdigest()[:20]}.so"


def _check_private(path: Path) -> None:
    """Raise OSError unless ``path`` is this user's and writable by nobody else: a library loaded from a directory
    another user can write to would run their code in this process."""
    st = path.stat()
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise PermissionError(f"{path} belongs to uid {st.st_uid}, not to this user")
    if st.st_mode & 0o022:
        raise PermissionError(f"{path} is writable by group or others (mode {st.st_mode & 0o777:o})")


def _build(cxx: str, directory: Path, name: str) -> tuple[Path, bool]:
    """The library in ``directory`` (built there if missing); whether this call built it."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    _check_private(directory)
    target = directory / name
    if target.is_file():
        _check_private(target)
        return target, False
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
    os.close(fd)
    try:
        cmd = [cxx, *FLAGS, f"-I{jax.ffi.include_dir()}", *map(str, SOURCES), "-o", tmp]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
        os.chmod(tmp, 0o755)  # whatever the umask: the reuse check refuses group- or world-writable files
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target, True


def _load() -> KernelStatus:
    cxx = compiler()
    if cxx is None:
        return KernelStatus(False, "no C++ compiler ($CXX, c++, g++ or clang++) on PATH")
    try:
        name = _library_name(cxx)
        try:
            path, built = _build(cxx, cache_dir(), name)
        except OSError as exc:  # an unwritable cache: a private directory for this process
            private = Path(tempfile.mkdtemp(prefix="pytest-reward-kernels-"))
            atexit.register(shutil.rmtree, private, ignore_errors=True)  # a loaded library may be unlinked
            log.info("kernel cache %s not usable (%s); building in %s", cache_dir(), exc, private)
            path, built = _build(cxx, private, name)
        library = ctypes.CDLL(str(path))
        for target in TARGETS:
            jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(getattr(library, target)), platform="cpu")
    except (
        OSError,
        RuntimeError,
        AttributeError,
        subprocess.SubprocessError,
        metadata.PackageNotFoundError,
    ) as exc:
        log.warning("CPU kernels unavailable, the XLA path runs: %s", exc)
        return KernelStatus(False, f"build or load failed: {exc}")
    return KernelStatus(True, f"{'built' if built else 'reused'} {path}", path)


def status() -> KernelStatus:
    """Build (once per process) and register the kernels; what came of it. Thread-safe. While
    ``PYTEST_REWARD_CPU_KERNELS=0`` it builds nothing and says so (and builds once that is unset)."""
    global _status
    if not enabled_by_env():
        return KernelStatus(False, "turned off by PYTEST_REWARD_CPU_KERNELS")
    with _lock:
        if _status is None:
            _status = _load()
        return _status


def available() -> bool:
    """Whether programs traced now call the kernels on the CPU (False when turned off by the environment)."""
    return status().available


def _require(what: str) -> None:
    got = status()
    if not got.available:
        raise RuntimeError(f"the CPU {what} kernel is not available: {got.detail}")


def decode_attention(q: jax.Array, k: jax.Array, v: jax.Array, valid: jax.Array, scale: float) -> jax.Array:
    """q (B, KV, G, Dh), k/v (B, KV, S, Dh) float32, valid (B, S) bool -> (B, KV, G, Dh) float32, on the CPU.

    Softmax attention of each query row over the valid slots of its row (a row with none: the mean of all its
    values, as the XLA path gives). On the CPU only; builds and registers the kernel on first use, and raises
    RuntimeError with the reason where it is not available (:func:`status`).
    """
    _require("decode-attention")
    out = jax.ShapeDtypeStruct(q.shape, jnp.float32)
    return jax.ffi.ffi_call(TARGET, out)(q, k, v, valid.astype(jnp.bool_), scale=np.float32(scale))


def decode_attention_update(
    qkv: jax.Array, slot: jax.Array, k: jax.Array, v: jax.Array, valid: jax.Array, scale: float
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """A decode step's attention, cache write included: qkv ((H + 2 KV) Dh, B) float32, the step's query, key and
    value projections feature-major (queries, keys, values, head by head; H = KV G), slot (B,) int32, k/v
    (B, KV, S, Dh) float32, valid (B, S) bool -> (output (H Dh, B) feature-major, k, v).

    Row b's key and value are written into slot ``slot[b]`` of its cache (a slot outside [0, S) writes nothing),
    then each query attends over its row's valid slots as :func:`decode_attention` does. The updated caches are
    the input buffers written in place (XLA aliases them, and copies an input that is used again afterwards). On
    the CPU only, as :func:`decode_attention`.
    """
    _require("decode-attention")
    B, KV, _, Dh = k.shape
    out = (
        jax.ShapeDtypeStruct((qkv.shape[0] - 2 * KV * Dh, B), jnp.float32),
        jax.ShapeDtypeStruct(k.shape, jnp.float32),
        jax.ShapeDtypeStruct(v.shape, jnp.float32),
    )
    call = jax.ffi.ffi_call(UPDATE_TARGET, out, input_output_aliases={2: 1, 3: 2})
    return call(qkv, slot.astype(jnp.int32), k, v, valid.astype(jnp.bool_), scale=np.float32(scale))


def prefill_attention(
    qkv: jax.Array, mask: jax.Array, queries: int, kv_heads: int, head_dim: int, scale: float
) -> jax.Array:
    """Causal attention over left-padded prompts: qkv (B, T, (H + 2 KV) Dh) float32, the query, key and value
    projections token-major (queries, keys, values, head by head; H = KV G; rotary positions already applied),
    mask (B, T) bool the real tokens -> (B, queries, H Dh) float32, the output of the last ``queries`` positions.

    Position i attends over the real tokens at or before it; a position with none (padding before the first real
    token) gets the mean of all T values of its row and head, as the XLA path gives. On the CPU only, as
    :func:`decode_attention`.
    """
    _require("prefill-attention")
    if qkv.ndim != 3:
        raise ValueError(f"prefill attention: qkv must be rank 3 (B, T, (KV G + 2 KV) Dh), got {qkv.shape}")
    B, T, C = qkv.shape
    heads = C // head_dim if kv_heads > 0 and head_dim > 0 and C % head_dim == 0 else 0
    if heads < 3 * kv_heads or (heads - 2 * kv_heads) % kv_heads:
        raise ValueError(
            f"prefill attention: qkv must be (B, T, (KV G + 2 KV) Dh) with KV={kv_heads}, Dh={head_dim}; got {qkv.shape}"
        )
    if not 0 <= queries <= T:
        raise ValueError(f"prefill attention: {queries} query positions of a {T}-token prompt")
    width = C - 2 * kv_heads * head_dim
    call = jax.ffi.ffi_call(PREFILL_TARGET, jax.ShapeDtypeStruct((B, queries, width), jnp.float32))
    return call(
        qkv,
        mask.astype(jnp.bool_),
        kv_heads=np.int64(kv_heads),
        head_dim=np.int64(head_dim),
        scale=np.float32(scale),
    )


def argmax_columns(x: jax.Array) -> jax.Array:
    """x (V, B) float32 -> (B,) int32: per column, the first index of its largest value, a NaN counting as larger
    than any number (``jnp.argmax(x, axis=0)``, and :func:`pytest_reward.jax.generate.argmax_first`).

    On the CPU only; builds and registers the kernels on first use, and raises RuntimeError with the reason where
    they are not available (:func:`status`).
    """
    _require("argmax")
    return jax.ffi.ffi_call(ARGMAX_TARGET, jax.ShapeDtypeStruct(x.shape[1:], jnp.int32))(x)


def pack_rows(w: Any) -> Any:
    """A weight matrix (N, K) -> its panels (ceil(N / 12), K, 12): ``panels[p, k, r] = w[12 p + r, k]``, the rows past
    N zero. The layout :func:`linear_packed` reads: a panel's twelve rows, k by k, in one sequential stream. Works
    on numpy arrays (on the host, once per parameter set) and on jax arrays alike."""
    xp = jnp if isinstance(w, jax.Array) else np
    N, K = w.shape
    P = -(-N // PANEL_ROWS)
    w = xp.pad(w, ((0, P * PANEL_ROWS - N), (0, 0)))
    return xp.transpose(w.reshape(P, PANEL_ROWS, K), (0, 2, 1))


def linear_packed(panels: jax.Array, x: jax.Array, bias: jax.Array) -> jax.Array:
    """``w @ x + bias[:, None]`` with w (N, K) given as :func:`pack_rows` panels (ceil(N / 12), K, 12), x (K, B) and
    bias (N,) float32 -> (N, B) float32: a decode step's weight matmul, a few activation columns against a whole
    weight matrix (1.5x XLA's matmul for the 6-layer d384 model's matrices at batch 32, 1.75x at batch 8;
    bench/bench_matmul.py).

    Each element is summed over k in increasing order by one thread, so a column's result does not depend on the
    other columns or the thread count. On the CPU only, as :func:`decode_attention`.
    """
    _require("linear")
    if panels.ndim != 3 or panels.shape[2] != PANEL_ROWS:
        raise ValueError(
            f"linear: the weights must be pack_rows panels (P, K, {PANEL_ROWS}), got {panels.shape}"
        )
    if x.ndim != 2 or x.shape[0] != panels.shape[1]:
        raise ValueError(f"linear: x must be (K, B) with K = {panels.shape[1]}, got {x.shape}")
    if bias.ndim != 1 or -(-bias.shape[0] // PANEL_ROWS) != panels.shape[0]:
        raise ValueError(f"linear: bias {bias.shape} must have the N rows of {panels.shape[0]} panels")
    out = jax.ShapeDtypeStruct((bias.shape[0], x.shape[1]), jnp.float32)
    return jax.ffi.ffi_call(LINEAR_TARGET, out)(panels, x, bias)
