"""Per-call overhead of the ignis Python binding.

Times ``ignis.rmsnorm`` on a host NumPy array of shape [1, 128] f32: with ``out=`` given, and
without (the output allocated by NumPy), and the same call on a [0, 128] input, where the library
validates the descriptors and returns before any kernel work, so what remains is the binding:
the Python wrapper, DLPack export of the three arrays, the descriptor conversion and the C call's
validation. ``_ext.rmsnorm`` (the extension function the wrapper calls) is timed too, to separate
the wrapper's cost. When PyTorch is importable its host tensors are timed the same way, next to
``torch.nn.functional.rms_norm`` for scale, and, with a GPU and ignis's CUDA backend, its CUDA
tensors (there a batch ends with a device synchronization, so the figure is the launch rate).

Each figure is the median over --repeats batches of --calls calls, in microseconds per call.

    PYTHONPATH=build/python python3 bench/python_overhead.py [--calls N] [--repeats N] [--json]
"""

import argparse
import json
import statistics
import sys
import time

import numpy as np

import ignis
from ignis import _ext


def per_call_us(fn, calls, repeats, sync=None):
    for _ in range(max(1, calls // 10)):
        fn()
    if sync:
        sync()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        if sync:
            sync()
        samples.append((time.perf_counter_ns() - start) / calls / 1e3)
    return statistics.median(samples)


def cases_for(name, make, hidden=128, torch_rms_norm=None):
    x = make((1, hidden))
    weight = make((hidden,))
    out = make((1, hidden))
    empty = make((0, hidden))
    empty_out = make((0, hidden))
    reference = []
    if torch_rms_norm is not None:
        reference = [(f"{name} torch.nn.functional.rms_norm [1,{hidden}] (for scale)",
                      lambda: torch_rms_norm(x, (hidden,), weight, 1e-6))]
    return reference + [
        (f"{name} rmsnorm [1,{hidden}] out= given", lambda: ignis.rmsnorm(x, weight, out=out)),
        (f"{name} rmsnorm [1,{hidden}] out allocated", lambda: ignis.rmsnorm(x, weight)),
        (f"{name} _ext.rmsnorm [1,{hidden}] (no wrapper)", lambda: _ext.rmsnorm(x, weight, 1e-6, out, None)),
        (f"{name} rmsnorm [0,{hidden}] out= given (no kernel work)",
         lambda: ignis.rmsnorm(empty, weight, out=empty_out)),
        (f"{name} _ext.rmsnorm [0,{hidden}] (no wrapper, no kernel work)",
         lambda: _ext.rmsnorm(empty, weight, 1e-6, empty_out, None)),
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000, help="calls per timed batch")
    parser.add_argument("--repeats", type=int, default=15, help="timed batches (the median is reported)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    cases = cases_for("numpy", lambda shape: rng.standard_normal(shape).astype(np.float32))
    try:
        import torch
    except ImportError:
        torch = None
    syncs = {}
    if torch is not None:
        rms_norm = getattr(torch.nn.functional, "rms_norm", None)
        cases += cases_for("torch-cpu", lambda shape: torch.randn(shape), torch_rms_norm=rms_norm)
        if torch.cuda.is_available() and ignis.cuda_device_count() > 0:
            cuda_cases = cases_for("torch-cuda", lambda shape: torch.randn(shape, device="cuda"),
                                   torch_rms_norm=rms_norm)
            syncs = {name: torch.cuda.synchronize for name, _ in cuda_cases}
            cases += cuda_cases

    results = [{"case": name, "us_per_call": per_call_us(fn, args.calls, args.repeats, syncs.get(name))}
               for name, fn in cases]
    if args.json:
        json.dump({"ignis": ignis.__version__, "python": sys.version.split()[0], "results": results},
                  sys.stdout, indent=2)
        print()
        return
    print(f"ignis {ignis.__version__}, Python {sys.version.split()[0]}, NumPy {np.__version__}"
          + (f", PyTorch {torch.__version__}" if torch is not None else ""))
    width = max(len(r["case"]) for r in results)
    for r in results:
        print(f"{r['case']:<{width}}  {r['us_per_call']:7.3f} us/call")


if __name__ == "__main__":
    main()
