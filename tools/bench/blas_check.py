"""Which BLAS this PyTorch process runs on, read from the libraries it has mapped after one
matrix product. The CPU baselines call require_openblas(): a baseline on the reference BLAS is
13-18x slower and no fair comparison, so it stops with the fix instead of printing a number."""
import os
import sys

import torch


def loaded_blas():
    """The BLAS and LAPACK libraries mapped into this process."""
    torch.ones(64, 64) @ torch.ones(64, 64)  # makes sure the BLAS is loaded and used
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "blas" in line.split()[-1]
                 or "lapack" in line.split()[-1]}
    return sorted(paths)


def require_openblas():
    paths = loaded_blas()
    # Debian's torch calls the generic libblas.so.3: whichever file provides it is the BLAS (an
    # OpenBLAS LAPACK loaded beside the reference BLAS does not make it OpenBLAS).
    generic = [p for p in paths if os.path.basename(p).startswith("libblas.so")]
    if generic:
        ok = all("openblas" in p for p in generic)
    else:
        ok = any("openblas" in os.path.basename(p) for p in paths)
    if ok:
        return
    sys.exit("error: PyTorch is running on " + (", ".join(generic or paths) or "an unknown BLAS") +
             ", not OpenBLAS\nfix: run it through tools/bench/torch_on_openblas "
             "(bash tools/setup.sh --bench installs OpenBLAS)")
