"""The cost of a ctx.step checkpoint: jobs with S no-op steps against jobs without.

Per repetition and kind (async task, sync task), interleaved: fresh schema, one
``pgq worker --concurrency C``, N jobs of ``bench.steps`` (or ``bench.steps_sync``) with
0 steps, then N with S steps, each drained as ``throughput.py`` drains. A step of a
no-op function still reads the job's stored steps (once per job, at its first step) and
commits one fenced insert into ``job_steps``; the difference of the two drains, per
step, is what one checkpoint costs. At ``--concurrency 1`` (the default) that is the
time a step adds to a job's run; at higher concurrency, the worker time it takes.

    python benchmarks/steps.py --jobs 1000 --steps 10 --reps 5
"""

from __future__ import annotations

from typing import Any

import _common as c

KINDS = {"async": "steps", "sync": "steps_sync"}


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--jobs", type=c.human_int, default=1000)
    p.add_argument("--steps", type=int, default=10, help="checkpoints per job (S)")
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--timeout", type=float, default=600.0, help="seconds allowed per drain")
    args = p.parse_args()
    if args.steps < 1:
        p.error("--steps must be at least 1")

    runs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
    with c.bench_session(args.dsn, drop=args.drop) as bench:
        info = c.machine(args.dsn)
        for rep in range(1, args.reps + 1):
            for kind, task in KINDS.items():
                plain = c.drain(bench, jobs=args.jobs, concurrency=args.concurrency,
                                timeout=args.timeout, task=task, extra_args=(0,))
                stepped = c.drain(bench, jobs=args.jobs, concurrency=args.concurrency,
                                  timeout=args.timeout, task=task, extra_args=(args.steps,))
                run = _compare(plain, stepped, jobs=args.jobs, steps=args.steps,
                               concurrency=args.concurrency)
                c.log(f"rep {rep} {kind}: {c.fmt(run['plain_per_s'])} jobs/s without steps, "
                      f"{c.fmt(run['steps_per_s'])} with {args.steps}: "
                      f"{c.fmt(run['ms_per_step'])} ms per step")
                runs[kind].append(run)

    result: dict[str, Any] = {
        "benchmark": "steps",
        "jobs": args.jobs,
        "steps": args.steps,
        "concurrency": args.concurrency,
        "reps": args.reps,
        "duplicates": sum(r["duplicates"] for rs in runs.values() for r in rs),
        "missing": sum(r["missing"] for rs in runs.values() for r in rs),
        "complete": all(r["complete"] for rs in runs.values() for r in rs),
    }
    for kind in KINDS:
        result[f"ms_per_step_{kind}"] = c.median([r["ms_per_step"] for r in runs[kind]])
        result[f"plain_per_s_{kind}"] = c.median([r["plain_per_s"] for r in runs[kind]])
        result[f"steps_per_s_{kind}"] = c.median([r["steps_per_s"] for r in runs[kind]])
    result["runs"] = runs
    result["machine"] = info
    if not args.quiet:
        c.table(
            f"steps: {args.jobs:,} jobs without and with {args.steps} ctx.step each, "
            f"pgq worker --concurrency {args.concurrency}",
            ["kind", "rep", "no steps jobs/s", f"{args.steps} steps jobs/s", "ms per step"],
            [[kind, i + 1, r["plain_per_s"], r["steps_per_s"], r["ms_per_step"]]
             for kind in KINDS for i, r in enumerate(runs[kind])]
            + [[kind, "median", result[f"plain_per_s_{kind}"], result[f"steps_per_s_{kind}"],
                result[f"ms_per_step_{kind}"]] for kind in KINDS],
        )
    c.emit(result)


def _compare(plain: dict[str, Any], stepped: dict[str, Any], *, jobs: int, steps: int,
             concurrency: int) -> dict[str, Any]:
    """One repetition: the two drains and the cost per step (worker milliseconds)."""
    per_step = None
    if plain["drain_s"] is not None and stepped["drain_s"] is not None:
        extra = stepped["drain_s"] - plain["drain_s"]
        per_step = c.rounded(extra * 1000 * concurrency / (jobs * steps), 3)
    return {
        "plain_s": plain["drain_s"],
        "steps_s": stepped["drain_s"],
        "plain_per_s": plain["drain_per_s"],
        "steps_per_s": stepped["drain_per_s"],
        "ms_per_step": per_step,
        "duplicates": plain["duplicates"] + stepped["duplicates"],
        "missing": plain["missing"] + stepped["missing"],
        "complete": plain["complete"] and stepped["complete"],
    }


if __name__ == "__main__":
    main()
