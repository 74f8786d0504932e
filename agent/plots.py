"""The report's plots as PNGs (matplotlib, Agg): the throughput/interactivity frontier, TTFT
against offered rate, the trials over time, and on real hardware the roofline shares. The numbers
come from agent/plot_data.py and tools/roofline.py; this module only draws them."""
from __future__ import annotations

from pathlib import Path

from agent import plot_data
from agent.ledger import Ledger

COLORS = {"kept": "tab:green", "reverted": "tab:orange", "failed": "tab:red", "rejected": "tab:purple",
          "skipped": "tab:gray"}
PHASE_SHADES = ("#f2f2f2", "#e3ecf7")  # alternating bands: adjacent phases stay tellable apart
DPI = 90


def _sweep(led: Ledger, tid: int) -> tuple[list[dict], int]:
    """The trial's first candidate measurement: its sweep points and GPU count."""
    ms = [m["data"] for m in led.measurements(tid, "candidate")]
    if not ms:
        return [], 1
    return ms[0].get("sweep") or [], int(ms[0].get("gpus") or 1)


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def frontier_png(led: Ledger, res: dict, out: Path) -> str | None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    kept = [r for r in res["trials"] if r["verdict"] == "kept"]
    base, best = (res.get("baseline") or {}).get("trial"), (res.get("best") or {}).get("trial")
    drawn = 0
    for r in kept:  # every kept step, faint; baseline and best drawn bold on top
        if r["id"] in (base, best):
            continue
        c = plot_data.frontier(*_sweep(led, r["id"]))
        if c.x:
            ax.plot(c.x, c.y, ".-", color="tab:gray", alpha=0.45, lw=1)
            ax.annotate(f"#{r['id']}", (c.x[-1], c.y[-1]), fontsize=7, color="tab:gray")
            drawn += 1
    for label, tid, col in (("baseline", base, "tab:blue"), ("best", best, "tab:green")):
        if tid is None:
            continue
        c = plot_data.frontier(*_sweep(led, tid))
        if c.x:
            ax.plot(c.x, c.y, "o-", color=col, lw=2, label=f"{label} (trial {tid})")
            drawn += 1
    if not drawn:
        plt.close(fig)
        return None
    if len(kept) > 2:
        ax.plot([], [], ".-", color="tab:gray", alpha=0.45, label="kept steps")
    ax.set(xlabel="interactivity: output tok/s per user (1 / TPOT p50)", ylabel="output tok/s per GPU",
           title="throughput vs interactivity (Pareto frontier of each sweep)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(plt, fig, out, "frontier.png")


def ttft_png(led: Ledger, res: dict, out: Path, slo_s: float) -> str | None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    drawn = False
    for label, s, col in (("baseline", res.get("baseline"), "tab:blue"), ("best", res.get("best"), "tab:green")):
        if not s:
            continue
        sweep, _ = _sweep(led, s["trial"])
        if not sweep:
            continue
        d = plot_data.ttft(sweep, slo_s)
        ax.plot(d.rate, d.p50, "o-", color=col, label=f"{label} p50")
        ax.plot(d.rate, d.p95, "s--", color=col, alpha=0.7, label=f"{label} p95")
        if d.knee_rate is not None:
            ax.axvline(d.knee_rate, color=col, ls=":", lw=1)
            ax.plot([d.knee_rate], [d.knee_p95], "*", ms=14, color=col, label=f"{label} knee {d.knee_rate:g} req/s")
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.axhline(slo_s, color="tab:red", lw=1.5, label=f"SLO: TTFT p95 {slo_s:g} s")
    ax.set(xlabel="offered rate (req/s)", ylabel="TTFT (s)", title="TTFT p50 / p95 vs offered load")
    ax.set_yscale("log")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return _save(plt, fig, out, "ttft.png")


def trials_png(res: dict, out: Path, objective_label: str) -> str:
    plt = _plt()
    d = plot_data.trials(res["trials"])
    fig, ax = plt.subplots(figsize=(10, 4))
    for i, b in enumerate(d.bands):
        ax.axvspan(b.start, b.end, color=PHASE_SHADES[i % 2], zorder=0)
        ax.text((b.start + b.end) / 2, 1.01, b.phase, transform=ax.get_xaxis_transform(), ha="center",
                va="bottom", fontsize=7, rotation=20)
    for v, col in COLORS.items():
        pts = [(x, y or 0.0) for x, y, w in zip(d.t, d.value, d.verdict) if w == v]
        if pts:
            ax.scatter([x for x, _ in pts], [y for _, y in pts], c=col, label=v, zorder=3, s=22)
    if d.best:
        ax.step(d.best_t, d.best, where="post", color="black", lw=1.5, label="running best", zorder=2)
    ax.set(xlabel="ground time (h)" if d.unit == "h" else "trial", ylabel=objective_label)
    ax.set_title("trials over time", pad=28)
    ax.legend(fontsize=7, loc="lower right")
    return _save(plt, fig, out, "trials.png")


def roofline_png(roof, out: Path) -> str | None:
    """Bars: the share of HBM bandwidth decode reaches and of peak FLOP/s prefill reaches."""
    bars = [(n, s) for n, s in (("decode\n(HBM bandwidth)", roof.decode), ("prefill\n(peak FLOP/s)", roof.prefill)) if s]
    if not bars:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3.8))
    ys = [s.share * 100 for _, s in bars]
    ax.barh([n for n, _ in bars], ys, color=["tab:blue", "tab:orange"][:len(bars)])
    ax.axvline(100, color="black", lw=1)
    for i, y in enumerate(ys):
        ax.text(min(y, 100) + 1.5, i, f"{y:.1f}%", va="center", fontsize=9)
    ax.set(xlim=(0, 110), xlabel="% of the roofline", title="best configuration: share of the roofline")
    # What was counted, under the axes: long enough to collide with the bars if put beside them.
    fig.text(0.01, 0.01, "\n".join(f"{n.split(chr(10))[0]}: {s.detail}" for n, s in bars), fontsize=7, va="bottom")
    fig.tight_layout(rect=(0, 0.08 * len(bars), 1, 1))
    fig.savefig(out / "roofline.png", dpi=DPI)
    plt.close(fig)
    return "roofline.png"


def _save(plt, fig, out: Path, name: str) -> str:
    fig.tight_layout()
    fig.savefig(out / name, dpi=DPI)
    plt.close(fig)
    return name


def write_plots(led: Ledger, res: dict, out: Path, *, slo_s: float, objective_label: str, roof=None) -> list[str]:
    files = [frontier_png(led, res, out), ttft_png(led, res, out, slo_s), trials_png(res, out, objective_label),
             roofline_png(roof, out) if roof is not None else None]
    return [f for f in files if f]
