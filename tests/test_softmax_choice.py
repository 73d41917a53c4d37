"""sm90/softmax_choice.h: which softmax switches each SM90 kernel takes (compiled on the host).

The header promises: the measured choice per kernel kind (input type, head dim, softcap, packed, paged)
when no flag is given; a flag, where
defined, sets its switch in every kernel; FP8 kernels never rescale lazily (P would leave e4m3's
range) and 16-bit ones never fold an FP8 scale, whatever the flags say.
"""

from __future__ import annotations

from pathlib import Path

from host_program import run_program

KINDS = [(fp8, head_dim, softcap, packed, paged) for fp8 in (False, True) for head_dim in (64, 96, 128, 256)
         for softcap in (False, True) for packed in (False, True) for paged in (False, True)]

PROGRAM = """
#include <cstdio>
#include "sm90/softmax_choice.h"
int main() {
    const struct { bool fp8; int head_dim; bool softcap; bool packed; bool paged; } kinds[] = {%s};
    for (const auto& k : kinds) {
        const auto c = fas_sm90::softmax_choice(k.fp8, k.head_dim, k.softcap, k.packed, k.paged);
        std::printf("%%d %%d %%d %%d %%d %%d %%d %%d %%d\\n", k.fp8, k.head_dim, k.softcap, k.packed, k.paged,
                    c.poly_exp2_every, c.lazy_rescale_log2, c.fold_p_scale, c.hold_pv_wait);
    }
}
"""


def choices(tmp_path: Path, *defines: str) -> dict:
    """{(fp8, head_dim, softcap, packed, paged): (poly_exp2_every, lazy_rescale_log2, fold_p_scale, hold_pv_wait)}."""
    rows = ", ".join(f"{{{str(f).lower()}, {d}, {str(c).lower()}, {str(p).lower()}, {str(g).lower()}}}"
                     for f, d, c, p, g in KINDS)
    lines = run_program(tmp_path, PROGRAM % rows, *defines).split("\n")
    table = {}
    for line in filter(None, lines):
        fp8, head_dim, softcap, packed, paged, poly, lazy, fold, hold = map(int, line.split())
        table[(bool(fp8), head_dim, bool(softcap), bool(packed), bool(paged))] = (poly, lazy, bool(fold), bool(hold))
    return table


def test_without_flags_each_switch_is_on_only_where_it_was_measured_to_pay(tmp_path):
    table = choices(tmp_path)
    for kind, (poly, lazy, fold, hold) in table.items():
        fp8, head_dim, softcap, packed, paged = kind
        # Measured to pay only there (the paged kernel: even from the release toolchain, so it keeps ptxas's order).
        assert hold == (softcap and not fp8 and head_dim >= 256 and not paged), kind
        if softcap and paged and not fp8 and head_dim >= 256:  # the 64-key paged stage: none measured fastest
            assert poly == 0, kind
        elif softcap:
            assert poly == (8 if fp8 or head_dim >= 256 else 4), kind
        else:  # only the packed 16-bit hd96 kernels (vision windows) measured faster with it
            assert poly == (4 if packed and not fp8 and head_dim == 96 else 0), kind
        assert (lazy > 0) == (not fp8 and head_dim >= 256), kind
        assert fold == (fp8 and head_dim >= 256), kind


def test_a_flag_sets_its_switch_in_every_kernel_the_math_allows(tmp_path):
    table = choices(tmp_path, "FAS_SM90_POLY_EXP2_EVERY=2", "FAS_SM90_LAZY_RESCALE_LOG2=4",
                    "FAS_SM90_FP8_FOLD_P_SCALE=1", "FAS_SM90_HOLD_PV_WAIT=1")
    for (fp8, _, _, _, _), (poly, lazy, fold, hold) in table.items():
        assert poly == 2
        assert hold
        assert lazy == (0 if fp8 else 4)  # e4m3 cannot hold P up to 2^4 * 448
        assert fold == fp8  # 16-bit kernels have no FP8 scale to fold


def test_flags_set_to_zero_turn_every_switch_off(tmp_path):
    table = choices(tmp_path, "FAS_SM90_POLY_EXP2_EVERY=0", "FAS_SM90_LAZY_RESCALE_LOG2=0",
                    "FAS_SM90_FP8_FOLD_P_SCALE=0", "FAS_SM90_HOLD_PV_WAIT=0")
    assert set(table.values()) == {(0, 0, False, False)}

