"""Adapters inside real trainers' process models.

* The adapters' callables (verl ``compute_score``, TRL ``reward_funcs`` sync and async, OpenRLHF ``reward_func``,
  slime ``custom_rm``) survive ``cloudpickle`` and ``pickle`` into a fresh interpreter that does not have the bundle
  on its ``sys.path``, and answer there as they did where they were loaded.
* verl's ``remote`` reward manager: ``compute_score``, loaded and wrapped as verl does, is shipped to a real Ray
  actor on a local Ray bound to 127.0.0.1 and called there.
* verl's ``custom_reward_function.reward_kwargs`` reach the reward functions.
* slime's group mode calls ``custom_rm(args, [samples])`` and gets a list.

Every script runs in a fresh interpreter whose working directory is an empty temporary directory: the bundle is
found only through the paths the trainers' loaders are given. The Ray test carries the project's ``ray`` marker (an
explicit opt-in: ``make test-ray``, or ``-m ray``, with the ``ray`` extra installed); the pickling round trips run in
every ``make test`` (cloudpickle is in the dev extra).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from .conftest import PROC_BUNDLE_NAME, server_env

NAME = PROC_BUNDLE_NAME


@pytest.fixture
def bundle(proc_bundle: Path) -> Path:
    return proc_bundle


def run_script(
    code: str, *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 180
) -> Any:
    """Run ``code`` in a fresh interpreter (cwd: an empty directory); it prints ``RESULT <json>`` last."""
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        cwd=cwd,
        env=env or server_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        pytest.fail(f"script timed out after {timeout} s\nstdout:\n{stdout}\nstderr:\n{stderr}")
    results = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not results:
        pytest.fail(f"script failed ({proc.returncode})\nstdout:\n{stdout}\nstderr:\n{stderr}")
    return json.loads(results[-1][len("RESULT ") :])


# The adapters loaded exactly as each trainer loads them, and the calls each trainer makes.
LOAD_AND_CALL = """
import asyncio, hashlib, importlib, importlib.util, os, sys, types

PROMPT = "<|im_start|>user\\n2+2?<|im_end|>\\n<|im_start|>assistant\\n"
QUESTION = [{"role": "user", "content": "2+2?"}]


def load(bundle_dir, name):
    package_dir = os.path.join(bundle_dir, name)
    # verl: load_module(path) without a module name -> spec_from_file_location(f"custom_module_{hash(...)}", path)
    path = os.path.join(package_dir, "verl.py")
    spec = importlib.util.spec_from_file_location(f"custom_module_{hash(os.path.abspath(path))}", path)
    verl = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(verl)
    # OpenRLHF: spec_from_file_location("reward_func", path), attribute reward_func
    spec = importlib.util.spec_from_file_location("reward_func", os.path.join(package_dir, "openrlhf_reward.py"))
    openrlhf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(openrlhf)
    # TRL (trl grpo --reward_funcs <bundle>.trl.<name>) and slime (load_function: import_module + getattr)
    sys.path.insert(0, bundle_dir)
    trl = importlib.import_module(name + ".trl")
    slime = importlib.import_module(name + ".slime")
    return {
        "verl": verl.compute_score,
        "openrlhf": openrlhf.reward_func,
        "trl": list(trl.REWARD_FUNCS),
        "trl_async": list(trl.REWARD_FUNCS_ASYNC),
        "slime": slime.custom_rm,
    }


def call(adapters):
    import inspect

    def sample(response):
        return types.SimpleNamespace(prompt=PROMPT, response=response, label="4")

    out = {
        "verl": adapters["verl"]("gsm8k", "4", "4", {"messages": QUESTION}, bonus=0.25),
        "openrlhf": adapters["openrlhf"]([PROMPT + "4<|im_end|>"], [PROMPT], ["4"]),
        "trl": [f(["2+2?", "2+2?"], ["4", "5"], ground_truth=["4", "4"]) for f in adapters["trl"]],
        "trl_async": [asyncio.run(f(["2+2?"], [[{"role": "assistant", "content": "4"}]], ground_truth=["4"]))
                      for f in adapters["trl_async"]],
        "slime": asyncio.run(adapters["slime"](None, sample("4"))),
        "slime_group": asyncio.run(adapters["slime"](None, [sample("4"), sample("5"), sample(" 4 ")])),
        "names": [f.__name__ for f in adapters["trl"] + adapters["trl_async"]],
        "coroutine_functions": {
            key: [inspect.iscoroutinefunction(f) for f in (v if isinstance(v, list) else [v])]
            for key, v in adapters.items()
        },
    }
    return out
"""


@pytest.mark.parametrize("pickler", ["cloudpickle", "pickle"])
def test_adapters_survive_pickling_into_a_fresh_interpreter(bundle, tmp_path, pickler):
    """Loaded as the trainers load them, pickled, unpickled in a new interpreter that has neither the bundle on
    ``sys.path`` nor the project: the same answers, the same names, async still async. The control: the bare reward
    function, pickled by reference to the bundle's frozen module, cannot be unpickled there."""
    payload, control = tmp_path / "adapters.pkl", tmp_path / "control.pkl"
    sender = run_script(
        LOAD_AND_CALL
        + f"""
import json, {pickler} as pickler
adapters = load(sys.argv[1], sys.argv[2])
before = call(adapters)
with open({str(payload)!r}, "wb") as fh:
    fh.write(pickler.dumps(adapters))
with open({str(control)!r}, "wb") as fh:
    fh.write(pickler.dumps(sys.modules[sys.argv[2]].FUNCTIONS["exact"]))
print("RESULT " + json.dumps(before))
""",
        str(bundle),
        NAME,
        cwd=tmp_path,
    )
    receiver = run_script(
        LOAD_AND_CALL
        + f"""
import json, {pickler} as pickler
bundle_dir, name = sys.argv[1], sys.argv[2]
assert name not in sys.modules and not any(p.startswith(bundle_dir) for p in sys.path), sys.path
try:
    pickler.loads(open({str(control)!r}, "rb").read())
    control = "loaded"
except Exception as exc:
    control = f"{{type(exc).__name__}}: {{exc}}"
adapters = pickler.loads(open({str(payload)!r}, "rb").read())
after = call(adapters)
after["control"] = control
after["bundle_file"] = sys.modules[name].__file__
print("RESULT " + json.dumps(after))
""",
        str(bundle),
        NAME,
        cwd=tmp_path,
    )
    assert receiver["control"] == "ModuleNotFoundError: No module named 'rewards'"
    assert receiver["bundle_file"] == str(bundle / NAME / "__init__.py")
    control_keys = ("control", "bundle_file")
    assert {k: v for k, v in receiver.items() if k not in control_keys} == sender
    assert sender["verl"]["score"] == pytest.approx((1.0 + 0.25) / 2) and sender["verl"]["bonus"] == 0.25
    assert sender["openrlhf"]["rewards"] == [0.5]
    assert sender["trl"] == [[1.0, 0.0], [0.0, 0.0]] and sender["trl_async"] == [[1.0], [0.0]]
    assert sender["slime"] == 0.5 and sender["slime_group"] == [0.5, 0.0, 0.5]
    assert sender["names"] == ["exact", "bonus", "exact_async", "bonus_async"]
    assert sender["coroutine_functions"] == {
        "verl": [False],
        "openrlhf": [False],
        "trl": [False, False],
        "trl_async": [True, True],
        "slime": [True],
    }


def test_an_adapter_refuses_a_different_bundle_at_its_path(bundle, tmp_path):
    """The content hash travels with the pickle: a bundle replaced at the same path is not silently used."""
    copy = tmp_path / bundle.name
    import shutil

    shutil.copytree(bundle, copy)
    payload = tmp_path / "verl.pkl"
    run_script(
        LOAD_AND_CALL
        + f"""
import json, pickle
adapters = load(sys.argv[1], sys.argv[2])
open({str(payload)!r}, "wb").write(pickle.dumps(adapters["verl"]))
print("RESULT {{}}")
""",
        str(copy),
        NAME,
        cwd=tmp_path,
    )
    manifest = json.loads((copy / NAME / "manifest.json").read_text())
    manifest["content_hash"] = "f" * 64
    (copy / NAME / "manifest.json").write_text(json.dumps(manifest))
    seen = run_script(
        f"""
import json, pickle
try:
    pickle.loads(open({str(payload)!r}, "rb").read())
    print("RESULT " + json.dumps("loaded"))
except Exception as exc:
    print("RESULT " + json.dumps(f"{{type(exc).__name__}}: {{exc}}"))
""",
        cwd=tmp_path,
    )
    assert seen.startswith("BundleError: ") and "not the " in seen and "this adapter was built from" in seen


# --- verl: reward_kwargs and the remote reward manager -------------------------------------------------------------

# verl/trainer/ppo/reward.py at volcengine/verl@b178a3cd56f58b2d502255daba591e92833930a7 (and verl 0.9.1, the same):
# get_custom_reward_fn loads compute_score with load_extern_object and returns
#     partial(_call_with_kwargs, raw_fn, dict(reward_fn_config.get("reward_kwargs", {})))
# for a sync function; the reward managers call it with keyword arguments only.
VERL_WRAP = """
from functools import partial


def _call_with_kwargs(raw_fn, extra_kwargs, *args, **kwargs):
    \"\"\"verl/trainer/ppo/reward.py (volcengine/verl@b178a3cd), verbatim.\"\"\"
    merged_kwargs = {**kwargs, **extra_kwargs}
    return raw_fn(*args, **merged_kwargs)


def get_custom_reward_fn(compute_score, reward_kwargs):
    import inspect
    assert not inspect.iscoroutinefunction(compute_score)  # verl's remote manager requires a sync function
    return partial(_call_with_kwargs, compute_score, dict(reward_kwargs))
"""


def test_verl_reward_kwargs_reach_the_reward_functions(bundle, tmp_path):
    """``custom_reward_function.reward_kwargs`` as verl passes them (the convention above): every reward function
    gets them as keyword arguments, over an ``extra_info`` field of the same name; the reward model tokenizer (an
    object) is not forwarded."""
    seen = run_script(
        LOAD_AND_CALL
        + VERL_WRAP
        + """
import json
compute_score = get_custom_reward_fn(load(sys.argv[1], sys.argv[2])["verl"], {"bonus": 0.75})
info = {"messages": QUESTION, "bonus": 0.1, "split": "train", "num_turns": 1, "rollout_reward_scores": {}}
plain = compute_score(data_source="gsm8k", solution_str="4", ground_truth="4", extra_info=info)
routed = compute_score(
    data_source="gsm8k", solution_str="5", ground_truth="4", extra_info=info,
    reward_router_address="127.0.0.1:9", reward_model_tokenizer=object(),
)
unwrapped = load(sys.argv[1], sys.argv[2])["verl"](data_source="gsm8k", solution_str="4", ground_truth="4")
print("RESULT " + json.dumps([plain, routed, unwrapped]))
""",
        str(bundle),
        NAME,
        cwd=tmp_path,
    )
    plain, routed, unwrapped = seen
    assert plain["bonus"] == 0.75 and plain["score"] == pytest.approx((1.0 + 0.75) / 2)
    assert routed["bonus"] == 0.75 and routed["exact"] == 0.0
    assert unwrapped["bonus"] == 0.0  # nothing passed: the function's own default
    assert set(plain) == set(routed) == set(unwrapped)  # verl indexes every sample with the first one's keys


RAY_DRIVER = """
import json, os, signal, sys, time

import ray

ray_dir = sys.argv[3]
ray.init(
    include_dashboard=False,
    _node_ip_address="127.0.0.1",
    num_cpus=1,
    _temp_dir=ray_dir,
    log_to_driver=False,
    configure_logging=False,
)
try:
    compute_score = get_custom_reward_fn(load(sys.argv[1], sys.argv[2])["verl"], {"bonus": 0.5})

    # verl/experimental/reward_loop/reward_manager/remote.py (volcengine/verl@b178a3cd), verbatim but for the
    # decorator's num_cpus: RemoteRewardManager ships self.compute_score to these actors by pickling it.
    @ray.remote(num_cpus=1)
    class RewardComputeWorker:
        def __init__(self, compute_score_fn):
            self.compute_score_fn = compute_score_fn

        def compute_score(self, **kwargs) -> dict:
            return self.compute_score_fn(**kwargs)

    worker = RewardComputeWorker.remote(compute_score)
    kwargs = dict(data_source="gsm8k", ground_truth="4", extra_info={"messages": QUESTION})
    remote = [ray.get(worker.compute_score.remote(solution_str=s, **kwargs), timeout=120) for s in ("4", "5")]
    local = [compute_score(solution_str=s, **kwargs) for s in ("4", "5")]

    @ray.remote(num_cpus=0)  # the actor holds the one CPU
    def call_bare(fn):
        return fn(messages=[{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]).score

    try:
        ray.get(call_bare.remote(sys.modules[sys.argv[2]].FUNCTIONS["exact"]), timeout=120)
        control = "called"
    except Exception as exc:
        control = str(exc)

    worker_pid = ray.get(worker.__ray_call__.remote(lambda self: os.getpid()), timeout=60)

    # every TCP/UDP socket that a process of this Ray session listens on or is bound to
    def children(pid):
        kids = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    stat = open(f"/proc/{entry}/stat").read()
                except OSError:
                    continue
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    kids.append(int(entry))
        return kids

    pids, todo = set(), [os.getpid()]
    while todo:
        pid = todo.pop()
        if pid not in pids:
            pids.add(pid)
            todo.extend(children(pid))
    inodes = {}
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    link = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if link.startswith("socket:["):
                    inodes[link[8:-1]] = pid
        except OSError:
            continue

    def address(hexaddr):
        import ipaddress, socket, struct
        host, port = hexaddr.split(":")
        raw = bytes.fromhex(host)
        if len(raw) == 4:
            return str(ipaddress.IPv4Address(struct.pack("<I", struct.unpack(">I", raw)[0])))
        words = struct.unpack("<4I", raw)
        return str(ipaddress.IPv6Address(struct.pack(">4I", *words)))

    sockets = []
    for table, wanted in (("tcp", "0A"), ("tcp6", "0A"), ("udp", "07"), ("udp6", "07")):
        for line in open(f"/proc/net/{table}").read().splitlines()[1:]:
            fields = line.split()
            if fields[3] == wanted and fields[9] in inodes:
                sockets.append([table, address(fields[1]), inodes[fields[9]]])
finally:
    ray.shutdown()
print("RESULT " + json.dumps({
    "remote": remote, "local": local, "control": control, "sockets": sockets, "pids": sorted(pids),
    "worker_pid": worker_pid, "driver_pid": os.getpid(),
}))
"""


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if text in cmdline:
                found.append(int(entry))
    return found


def _is_loopback(host: str) -> bool:
    import ipaddress

    address = ipaddress.ip_address(host)
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


@pytest.mark.ray
def test_verl_remote_reward_manager_runs_compute_score_in_a_real_ray_worker(bundle, tmp_path):
    """A local Ray (one CPU, every listener on loopback), verl's ``RewardComputeWorker`` actor given the
    ``compute_score`` that verl's loader and ``get_custom_reward_fn`` made from the bundle's ``verl.py``: the actor
    (another process, without the bundle on its path) answers as the driver does, reward_kwargs included. The
    control: the bundle's bare reward function fails in a Ray worker with ``ModuleNotFoundError`` (the adapter is
    what makes it importable there)."""
    import tempfile

    ray_dir = tempfile.mkdtemp(prefix="rr-", dir="/tmp")  # short: Ray's unix socket paths have a length limit
    env = server_env(RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_USAGE_STATS_ENABLED="0", RAY_TMPDIR=ray_dir)
    for key in ("RAY_ADDRESS", "RAY_NAMESPACE"):
        env.pop(key, None)
    try:
        seen = run_script(
            LOAD_AND_CALL + VERL_WRAP + RAY_DRIVER,
            str(bundle),
            NAME,
            ray_dir,
            cwd=tmp_path,
            env=env,
            timeout=300,
        )
    finally:
        leftover = _processes_mentioning(ray_dir)
        for (
            pid
        ) in leftover:  # only processes of this test's Ray session (their command lines name its directory)
            os.kill(pid, signal.SIGKILL)
        import shutil

        shutil.rmtree(ray_dir, ignore_errors=True)
    assert leftover == [], "Ray processes outlived ray.shutdown()"
    assert seen["remote"] == seen["local"]
    good, bad = seen["remote"]
    assert good["score"] == pytest.approx(0.75) and good["bonus"] == 0.5 and good["exact"] == 1.0
    assert bad["exact"] == 0.0 and bad["score"] == pytest.approx(0.25)
    assert seen["worker_pid"] != seen["driver_pid"] and seen["worker_pid"] in seen["pids"]
    assert "No module named 'rewards'" in seen["control"], seen["control"]
    assert seen["sockets"], "no Ray socket found: the check would prove nothing"
    outside = [s for s in seen["sockets"] if not _is_loopback(s[1])]
    assert outside == [], f"Ray bound non-loopback addresses: {outside}"


# --- slime: one sample, and group mode ----------------------------------------------------------------------------

# slime/rollout/rm_hub/__init__.py at THUDM/slime@624b824a898ab0ec1fcb4d373004c7f3852bf515: with --custom-rm-path,
# async_rm awaits rm_function(args, sample, **kwargs); batched_async_rm (--group-rm, or a rollout that returns
# several samples) awaits rm_function(args, samples, **kwargs) and zips the list it returns with the samples.
# load_function is slime/utils/misc.py's. docs/en/get_started/customization.md documents both signatures.
SLIME = """
import asyncio, importlib, json, types


def load_function(path):
    module_path, _, attr = path.rpartition(".")
    module = importlib.import_module(module_path)
    return getattr(module, attr)


async def async_rm(args, sample, **kwargs):
    if args.custom_rm_path is not None:
        rm_function = load_function(args.custom_rm_path)
        return await rm_function(args, sample, **kwargs)
    raise NotImplementedError


async def batched_async_rm(args, samples, **kwargs):
    if args.custom_rm_path is not None:
        rm_function = load_function(args.custom_rm_path)
        return await rm_function(args, samples, **kwargs)
    return await asyncio.gather(*[async_rm(args, sample, **kwargs) for sample in samples])


bundle_dir, name = sys.argv[1], sys.argv[2]
sys.path.insert(0, bundle_dir)  # slime imports --custom-rm-path as a dotted module path
args = types.SimpleNamespace(custom_rm_path=name + ".slime.custom_rm")


def sample(response):
    return types.SimpleNamespace(prompt=PROMPT, response=response, label="4", reward=None)


async def main():
    group = [sample("4"), sample("5"), sample("4")]
    rewards = await batched_async_rm(args, group)
    for s, reward in zip(group, rewards, strict=False):
        s.reward = reward
    single = [await async_rm(args, s) for s in group]
    fanned = await batched_async_rm(args, [[sample("4"), sample("5")], [sample("4")]])
    with_kwargs = await async_rm(args, sample("4"), bonus=1.0)
    return {"rewards": rewards, "assigned": [s.reward for s in group], "single": single, "fanned": fanned,
            "with_kwargs": with_kwargs}


print("RESULT " + json.dumps(asyncio.run(main())))
"""


def test_slime_group_mode_gets_one_reward_per_sample(bundle, tmp_path):
    seen = run_script(LOAD_AND_CALL + SLIME, str(bundle), NAME, cwd=tmp_path)
    assert seen["rewards"] == [0.5, 0.0, 0.5] == seen["assigned"] == seen["single"]
    assert seen["fanned"] == [[0.5, 0.0], [0.5]]
    assert seen["with_kwargs"] == pytest.approx(1.0)  # (exact 1 + bonus 1) / 2
