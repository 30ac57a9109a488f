"""engramlab from Python: plans, scenarios and the swarm, the bitwise oracle
(hash ids, the request-state hasher, reference rows) and the runtime's lookup
on torch tensors. The compiled part (_engramlab) is thin over engramlab's C++
core and harness; this file only re-exports it and converts the reference's
bf16 bits to a torch tensor where asked.

    import engramlab
    plan = engramlab.plan({"hosts": [{"name": "gb200", "gpus": 4, "gpu_model": "GB200", "shm_size": "190GiB"}],
                           "layout": {"tp": 1, "dp": 4}, "config": {"cpu_offload": True}})
    plan["ranks"][0]["placement"]                      # 'host_shared'
"""

import os as _os

from . import _engramlab
from ._engramlab import (  # noqa: F401
    AlreadyExistsError,
    DeadlineExceededError,
    EngramTables,
    Error,
    FailedPreconditionError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    RequestHasher,
    ResourceExhaustedError,
    UnavailableError,
    fuzz,
    has_cuda,
    has_emulator,
    hash_ids,
    model_info,
    plan,
    run_scenario,
    scenario_info,
    table_rows,
)

__all__ = [
    "Error", "InvalidArgumentError", "FailedPreconditionError", "ResourceExhaustedError", "UnavailableError",
    "PermissionDeniedError", "NotFoundError", "AlreadyExistsError", "DeadlineExceededError", "InternalError",
    "plan", "run_scenario", "scenario_info", "fuzz", "hash_ids", "RequestHasher", "reference_lookup", "table_rows", "model_info",
    "EngramTables", "has_cuda", "has_emulator", "cli_path",
]


def _find_cli():
    """The `engramlab` command reproduce lines name: ENGRAMLAB_CLI, else the
    one installed beside this package, else the build tree's."""
    given = _os.environ.get("ENGRAMLAB_CLI")
    if given:
        return given
    here = _os.path.dirname(_os.path.abspath(__file__))
    if _os.path.realpath(here) == _os.path.realpath(_engramlab._package_build_dir):
        return _engramlab._cli_build_path
    installed = _os.path.normpath(_os.path.join(here, _engramlab._cli_from_package))
    return installed if _os.access(installed, _os.X_OK) else "engramlab"


cli_path = _find_cli()
_engramlab._set_rerun_binary(cli_path)


def reference_lookup(model, layer, row_ids, engine="engramlab", fill_seed=1, dtype="uint16", summed=False):
    """The bitwise CPU reference rows of row_ids (see _engramlab.reference_lookup):
    uint16 bits [*row_ids.shape, dim], or with dtype=torch.bfloat16 (or
    "bfloat16") the same bits as a CPU torch.bfloat16 tensor."""
    bits = _engramlab.reference_lookup(model, layer, row_ids, engine, fill_seed, summed)
    if dtype == "uint16":
        return bits
    import torch  # only where a tensor is asked for

    if dtype in ("bfloat16", torch.bfloat16):
        # torch has no uint16 before 2.3: the same bits through int16.
        return torch.from_numpy(bits.view("int16")).view(torch.bfloat16)
    raise TypeError(f"dtype: {dtype!r}; give 'uint16' (numpy bits) or torch.bfloat16")


reference_lookup.__doc__ += "\n\n" + _engramlab.reference_lookup.__doc__
