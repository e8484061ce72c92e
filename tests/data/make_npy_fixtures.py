#!/usr/bin/env python3
"""Writes the small numpy-made .npy fixtures committed under tests/data/ (read by the unit
tests) and the seed corpus under tests/fuzz/corpus/ (valid files plus headers the reader must
refuse). Run from anywhere with a python3 that has numpy; the outputs are deterministic.

Every numeric fixture holds value[i] = (i - 3) / 4 at C-order flat index i, exact in every type.
"""
import pathlib

import numpy as np

TESTS = pathlib.Path(__file__).resolve().parent.parent
DATA = TESTS / "data"
CORPUS = TESTS / "fuzz" / "corpus"


def values(shape, dtype="<f8"):
    count = int(np.prod(shape))
    return ((np.arange(count) - 3) / 4).reshape(shape).astype(dtype)


def bf16_bits(array):
    # The values are exact in bf16, so truncating the float32 bits is the bf16 encoding.
    return (array.astype("<f4").view("<u4") >> 16).astype("<u2")


def save(directory, name, array, version=None):
    with open(directory / name, "wb") as f:
        np.lib.format.write_array(f, array, version=version, allow_pickle=True)


def numeric_fixtures(directory):
    a = values((2, 3))
    save(directory, "f32_v1_2x3.npy", a.astype("<f4"), (1, 0))
    save(directory, "f16_v2_2x3.npy", a.astype("<f2"), (2, 0))
    save(directory, "f64_v3_2x3.npy", a.astype("<f8"), (3, 0))
    save(directory, "f32_big_endian_2x3.npy", a.astype(">f4"))
    save(directory, "f32_fortran_2x3x4.npy", np.asfortranarray(values((2, 3, 4), "<f4")))
    save(directory, "bf16_int16_2x3.npy", bf16_bits(a).view("<i2"))
    save(directory, "bf16_void_2x3.npy", bf16_bits(a).view("V2"))
    save(directory, "f16_scalar.npy", np.array(1.5, dtype="<f2"))
    save(directory, "f32_empty_0x3.npy", np.zeros((0, 3), dtype="<f4"))


def rejected_fixtures(directory):
    a = values((2, 3))
    save(directory, "reject_int32.npy", a.astype("<i4"))
    save(directory, "reject_bool.npy", a > 0)
    save(directory, "reject_unicode.npy", np.array(["ab", "c"]))
    save(directory, "reject_object.npy", np.array([1, "x"], dtype=object))
    save(directory, "reject_structured.npy", np.zeros(2, dtype=[("x", "<f4"), ("y", "<i2")]))
    save(directory, "big_endian_int16.npy", bf16_bits(a).astype(">i2"))
    save(directory, "uint16_fortran.npy", np.asfortranarray(bf16_bits(values((3, 2)))))


def main():
    DATA.mkdir(exist_ok=True)
    CORPUS.mkdir(parents=True, exist_ok=True)
    numeric_fixtures(DATA)
    numeric_fixtures(CORPUS)
    rejected_fixtures(CORPUS)


if __name__ == "__main__":
    main()
