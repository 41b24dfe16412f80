"""The one judgement of paired rounds that the comparison scripts share
(scripts/compare-llama-bench.sh, scripts/bench-host-summary.py, scripts/run-vs-bench.sh)."""
import math
import statistics


def paired(ratios):
    """The median of the per-round ratios (each round's two runs adjacent in time, so a slow
    spell of the machine falls on both) and twice its standard error, estimated robustly:
    1.2533 × σ / √n with σ = 1.4826 × the median absolute deviation. A round in which one
    side's process ran at a different speed throughout (seen here: 0.59 and 1.56 beside
    rounds at 1.03) moves neither the median nor the MAD. Fewer than 3 rounds: no spread (inf)."""
    m = statistics.median(ratios)
    if len(ratios) < 3:
        return m, float("inf")
    mad = statistics.median(abs(r - m) for r in ratios)
    return m, 2 * 1.2533 * 1.4826 * mad / math.sqrt(len(ratios))
