#!/usr/bin/env python3
"""Fails when a build's output shows an unknown wgmma kernel that ptxas serialized or gave waits.

When ptxas cannot keep a kernel's warpgroup products (wgmma) asynchronous, it waits for each
product before issuing the next and says so with an *info* line, "(C7510..C7519) Potential
Performance Loss: wgmma.mma_async instructions are serialized due to <why> ... function
'<kernel>'": never a warning, so the build stays green while the kernel loses from a few to tens
of percent (a forward whose wait for its products was predicated on a computed value ran 27 %
slower; share/docs/performance-log.md, 2026-12-04). Its other note, "(C7517) warpgroup.wait is
injected ... to allow use of registers defined by GMMA in function '<kernel>'" (or C7519,
warpgroup.arrive), says that it added a wait for every product in flight before some
instruction: the overlap meant there is lost as well (a dQ^T staging carried into the next
iteration, 2026-12-06). This reads the build's output, lists every kernel with either note and
the reason, and exits 1 when one of them is not in the known list
(share/scripts/wgmma_serialized_kernels.txt: one mangled name a line, `#` starts a comment), so
that a change which serializes a kernel is seen at build time, on a machine without a GPU.

Known kernels that the output no longer shows serialized are listed as such (their line may go;
an incremental build that did not compile them shows them too, so this never fails on them).

  cmake --build --preset ci 2>&1 | tee build/ci/build.log
  python3 share/scripts/check_wgmma_pipelines.py build/ci/build.log

Exit codes: 0 nothing unknown serialized; 1 an unknown kernel serialized; 2 a file unreadable.
"""
import argparse
import os
import re
import sys

SERIALIZED = re.compile(r"\((C751\d)\) Potential Performance Loss: wgmma\.mma_async instructions "
                        r"are (serialized .*?)\s*(?:in|for) the function '([^']+)'")
INJECTED = re.compile(r"\((C751\d)\) (warpgroup\.(?:wait|arrive) is injected) in around line \d+ "
                      r"by compiler (.*?)\s*in function '([^']+)'")
DEFAULT_KNOWN = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                             "wgmma_serialized_kernels.txt")


def serialized_kernels(lines):
    """{kernel: (code, what ptxas did and why)} from ptxas's lines in a build's output; a kernel
    both serialized and given injected waits is listed as serialized."""
    found = {}
    for line in lines:
        match = SERIALIZED.search(line)
        if match:
            code, reason, kernel = match.groups()
            found[kernel] = (code, reason)
            continue
        match = INJECTED.search(line)
        if match:
            code, what, why, kernel = match.groups()
            found.setdefault(kernel, (code, f"{what} {why}"))
    return found


def known_kernels(lines):
    """The mangled names of a known-list file, comments and blank lines left out."""
    return {line.split("#", 1)[0].strip() for line in lines} - {""}


def readable(kernel):
    """A short form of a cuflash kernel's mangled name: architecture and family, element type,
    head_dim (the mangled name itself where it does not have that form)."""
    family = re.search(r"\d([a-z_]+_kernel)I", kernel)
    arch = re.search(r"(sm\d\d)", kernel)
    element = re.search(r"kernelI(?:\d+)?(__nv_bfloat16|__half|f)", kernel)
    head_dim = re.search(r"Li(\d+)E", kernel)
    if not (family and arch and element and head_dim):
        return kernel
    dtype = {"__nv_bfloat16": "bf16", "__half": "fp16", "f": "fp32"}[element.group(1)]
    return f"{arch.group(1)} {family.group(1)} {dtype} head_dim {head_dim.group(1)}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("build_output", help="the build's output (stdout and stderr)")
    parser.add_argument("--known", default=DEFAULT_KNOWN, help="the known-list file")
    args = parser.parse_args()
    try:
        with open(args.build_output, errors="replace") as f:
            found = serialized_kernels(f)
        with open(args.known) as f:
            known = known_kernels(f)
    except OSError as error:
        print(f"error: {error.filename}: {error.strerror}", file=sys.stderr)
        return 2
    unknown = sorted(kernel for kernel in found if kernel not in known)
    for kernel in sorted(found):
        code, reason = found[kernel]
        status = "NEW" if kernel in unknown else "known"
        print(f"{status}: {readable(kernel)}: {code} {reason}\n  {kernel}")
    for kernel in sorted(known - set(found)):
        print(f"not serialized in this output (known): {readable(kernel)}\n  {kernel}")
    print(f"{len(found)} kernels serialized or given injected waits, {len(unknown)} of them not "
          "known")
    if unknown:
        print(f"error: ptxas serialized the wgmma of {len(unknown)} kernels not in {args.known}, "
              "or injected waits into them: see the lines marked NEW", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
