"""The fill micro-benchmark runs and actually exercises fills (no timing asserted)."""

from tools.fill_overhead import run


def test_micro_benchmark_exercises_strict_and_echo() -> None:
    res = run(history=3000, steps=2000)
    assert res["pushes"] == 2000
    assert res["proposals"] > 0 and res["injected"] > 0
    assert res["tokens_entered"] == res["pushes"] + res["injected"]
