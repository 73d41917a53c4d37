"""src/sm90/exp2_fma.h, compiled on the host with g++, against the promises its comment makes: the
FMA-pipe 2^x that the SM90 softmax may use for a share of its exponentials (sm90/softmax.cuh).
The device build runs the same float operations (round-to-nearest intrinsics)."""

from host_program import run_program

PROGRAM = r"""
#include <cmath>
#include <cstdio>
#include <limits>
#include "sm90/exp2_fma.h"
int main() {
    double worst = 0, worst_x = 0;
    long samples = 0, wrong_integers = 0, nonzero_below = 0;
    // Dense over the range a softmax feeds it: scores minus the row max, scaled to log2 units.
    for (long i = 0; i <= 126L * 65536; ++i) {
        const float x = -static_cast<float>(i) / 65536.f;
        const double err = std::fabs(fas_sm90::exp2_fma(x) / std::exp2(static_cast<double>(x)) - 1.0);
        if (err > worst) { worst = err; worst_x = x; }
        ++samples;
    }
    // A little above 0 too: the FFMA that subtracts the row max may round up by an ulp.
    for (float x = 0.f; x <= 0.5f; x += 1.f / 4096) {
        const double err = std::fabs(fas_sm90::exp2_fma(x) / std::exp2(static_cast<double>(x)) - 1.0);
        if (err > worst) { worst = err; worst_x = x; }
    }
    for (int j = -126; j <= 0; ++j)
        if (fas_sm90::exp2_fma(static_cast<float>(j)) != std::ldexp(1.f, j)) ++wrong_integers;
    const float below[] = {-126.001f, -127.f, -150.f, -1e30f, -std::numeric_limits<float>::infinity()};
    for (float x : below)
        if (fas_sm90::exp2_fma(x) != 0.f) ++nonzero_below;
    std::printf("%ld %.9g %.9g %ld %ld\n", samples, worst, worst_x, wrong_integers, nonzero_below);
    return 0;
}
"""


def test_exp2_fma_meets_its_error_bound_and_edges(tmp_path):
    samples, worst, worst_x, wrong_integers, nonzero_below = run_program(tmp_path, PROGRAM, optimize=True).split()
    assert int(samples) == 126 * 65536 + 1
    # The header promises at most 1.02e-4 relative error: below bf16's rounding of P (2^-9).
    assert float(worst) <= 1.02e-4, f"relative error {worst} at x = {worst_x}"
    assert float(worst) < 2.0 ** -9
    assert int(wrong_integers) == 0, "2^j must be exact at integers (the row's maximum gives exactly 1)"
    assert int(nonzero_below) == 0, "x < -126 and -inf (masked scores) must give 0"
