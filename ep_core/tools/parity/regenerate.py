"""Regenerate the parity reports kept under ``docs/parity/`` (``make parity``)::

    NUMBA_ENABLE_CUDASIM=1 python -m ep_core.tools.parity.regenerate docs/parity

Writes ``<slug>.md``, ``<slug>.json`` and ``<slug>.html`` per EP and an index ``README.md``.
Which EPs, and how far each is run, is read from a targets file (default ``<out_dir>/targets.toml``,
i.e. ``docs/parity/targets.toml``): ep-core itself names no EP. A target may skip its real models
when an environment variable is set (a simulator too slow for them), saying why in its report.
An EP that is not installed or fails to load is listed in the index with the reason, and the
exit code is 3 unless ``--allow-missing``."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from ep_core.sdk.errors import ConfigError

TARGETS_FILE = "targets.toml"


@dataclass(frozen=True)
class Target:
    """One EP's report: what runs, and why it is bounded that way (``why`` is shown in the index)."""

    ep: str
    slug: str
    why: str
    only_ep_ops: bool = False
    include_expanded: bool = True
    max_elements: int | None = None
    models: tuple[str, ...] = ()
    ops: tuple[str, ...] = ()
    skip_models_when: tuple[tuple[str, str], ...] = ()  # (variable, value): all must match
    skip_models_reason: str = ""

    def models_skipped(self) -> str | None:
        """The reason to skip the models in this environment, or None to run them."""
        if self.skip_models_when and all(os.environ.get(k) == v for k, v in self.skip_models_when):
            return self.skip_models_reason
        return None


@dataclass(frozen=True)
class Targets:
    """A targets file: environment defaults (set before any EP loads, unless already set) and targets."""

    env: Mapping[str, str]
    targets: tuple[Target, ...]


_TYPES: dict[str, type] = {
    "ep": str,
    "slug": str,
    "why": str,
    "only_ep_ops": bool,
    "include_expanded": bool,
    "max_elements": int,
    "models": list,
    "ops": list,
    "skip_models_when": dict,
    "skip_models_reason": str,
}


def _target(path: Path, i: int, raw: Any) -> Target:
    where = f"{path}: [[target]] #{i + 1}"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} is not a table")
    known = {f.name for f in fields(Target)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"{where} has unknown keys {unknown}; known keys: {sorted(known)}")
    missing = [k for k in ("ep", "slug", "why") if k not in raw]
    if missing:
        raise ConfigError(f"{where} lacks {missing}")
    for key, value in raw.items():
        if not isinstance(value, _TYPES[key]) or (key == "max_elements" and isinstance(value, bool)):
            raise ConfigError(f"{where} ({raw['ep']}): {key} = {value!r} should be of type {_TYPES[key].__name__}")
    when = raw.get("skip_models_when", {})
    if not all(isinstance(v, str) for v in when.values()):
        raise ConfigError(f"{where} ({raw['ep']}): skip_models_when values must be strings, got {when!r}")
    if bool(when) != bool(raw.get("skip_models_reason")):
        raise ConfigError(f"{where} ({raw['ep']}): skip_models_when and skip_models_reason go together")
    return Target(
        **{
            **raw,
            "models": tuple(raw.get("models", ())),
            "ops": tuple(raw.get("ops", ())),
            "skip_models_when": tuple(sorted(when.items())),
        }
    )


def load_targets(path: Path) -> Targets:
    """Read a targets file; a ``ConfigError`` names the file and the entry at fault."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"no parity targets file {path}; write one (see docs/parity/{TARGETS_FILE})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    unknown = sorted(set(data) - {"env", "target"})
    if unknown:
        raise ConfigError(f"{path} has unknown tables {unknown}; it holds [env] and [[target]]")
    env = data.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise ConfigError(f"{path}: [env] maps variable names to strings, got {env!r}")
    targets = tuple(_target(path, i, raw) for i, raw in enumerate(data.get("target", [])))
    if not targets:
        raise ConfigError(f"{path} names no [[target]]")
    for key in ("ep", "slug"):
        values = [getattr(t, key) for t in targets]
        dupes = sorted({v for v in values if values.count(v) > 1})
        if dupes:
            raise ConfigError(f"{path}: {key} {dupes} appears in more than one [[target]]")
    return Targets(env=env, targets=targets)


def regenerate(
    out_dir: Path, targets: Sequence[Target], progress: bool | None = None, listed: Sequence[Target] = ()
) -> list[tuple[Target, str]]:
    """Write every target's reports; returns (target, problem) for those that could not run. The index
    also keeps the earlier reports of ``listed`` targets not run now (``--only``)."""
    from ep_core.tools.parity import EpLoadFailure, build_report
    from ep_core.tools.parity.progress import ProgressBar
    from ep_core.tools.parity.render import render_text, write_report

    out_dir.mkdir(parents=True, exist_ok=True)
    missing: list[tuple[Target, str]] = []
    done: list[tuple[Target, dict[str, Any]]] = []
    for t in targets:
        t0 = time.monotonic()
        print(f"== {t.ep}: {t.why}", file=sys.stderr)
        try:
            report = build_report(
                t.ep,
                static=True,
                runtime=True,
                node_tests=True,
                ops=list(t.ops) or None,
                only_ep_ops=t.only_ep_ops,
                include_expanded=t.include_expanded,
                max_elements=t.max_elements,
                models=t.models,
                skip_models_reason=t.models_skipped(),
                progress=ProgressBar(progress),
            )
        except EpLoadFailure as exc:
            print(f"   skipped: {exc}", file=sys.stderr)
            missing.append((t, str(exc)))
            continue
        for fmt in ("md", "json", "html"):
            write_report(report.data, fmt, out_dir / f"{t.slug}.{fmt}")
        sys.stderr.write(render_text(report.data))
        print(f"   wrote {t.slug}.md/.json/.html in {time.monotonic() - t0:.0f}s", file=sys.stderr)
        done.append((t, report.data))
    _write_index(out_dir, done, missing, listed or targets)
    return missing


def _write_index(
    out_dir: Path,
    done: Sequence[tuple[Target, dict[str, Any]]],
    missing: Sequence[tuple[Target, str]],
    listed: Sequence[Target],
) -> None:
    """The index lists every target: fresh reports, reports left from an earlier run (``--only``),
    and targets that could not be generated, with the reason."""
    import json

    fresh = {t.ep for t, _ in done} | {t.ep for t, _ in missing}
    done = list(done)
    for t in listed:
        old = out_dir / f"{t.slug}.json"
        if t.ep not in fresh and old.is_file():
            try:
                done.append((t, json.loads(old.read_text(encoding="utf-8"))))
            except (OSError, ValueError):
                pass
    order = {t.ep: i for i, t in enumerate(listed)}
    done.sort(key=lambda td: order.get(td[0].ep, 99))
    lines = [
        "# Parity reports",
        "",
        "Generated by `make parity` (`python -m ep_core.tools.parity.regenerate docs/parity`). How to read them: "
        "[../parity.md](../parity.md).",
        "",
        "| EP | selection | static: ONNX ops (newest opset) | runtime: pass / fail / error / fallback / skipped | "
        "pass rate | reports |",
        "|---|---|---|---|---|---|",
    ]
    for t, d in done:
        st, rt = d["static"], d["runtime"]
        ops = st["coverage_vs_onnx"]["ops_latest"]
        tot = rt["totals"]
        rate = "n/a" if rt["pass_rate"] is None else f"{rt['pass_rate']:.1f}%"
        lines.append(
            f"| `{t.ep}` {d['ep']['version']} | {t.why} | {ops['covered']}/{ops['total']} | "
            f"{tot['pass']} / {tot['fail']} / {tot['error']} / {tot['fallback']} / {tot['skipped']} | {rate} | "
            f"[md]({t.slug}.md) · [json]({t.slug}.json) · [html]({t.slug}.html) |"
        )
    for t, why in missing:
        lines.append(f"| `{t.ep}` | not generated: {why.replace('|', '/')} | | | | |")
    if done:
        env = done[0][1]["environment"]
        lines += [
            "",
            f"Environment: onnx {env['onnx']}, NumPy {env['numpy']}, Python {env['python']}, "
            f"CUDA simulator {'on' if env['cuda_simulator'] else 'off'}.",
        ]
    (out_dir / "README.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ep_core.tools.parity.regenerate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("out_dir", type=Path, help="folder for the reports (docs/parity)")
    parser.add_argument("--targets", type=Path, help=f"targets file (default: OUT_DIR/{TARGETS_FILE})")
    parser.add_argument("--only", metavar="EP,EP", help="regenerate just these EPs")
    parser.add_argument("--allow-missing", action="store_true", help="exit 0 even if an EP could not be loaded")
    parser.add_argument("--progress", action="store_true", help="progress bar even when stderr is not a terminal")
    args = parser.parse_args(argv)
    try:
        config = load_targets(args.targets or args.out_dir / TARGETS_FILE)
    except ConfigError as exc:
        parser.error(str(exc))
    # Before any EP loads (and imports its stack): e.g. a simulator when there is no device.
    for name, value in config.env.items():
        os.environ.setdefault(name, value)
    targets = list(config.targets)
    if args.only:
        wanted = {n.strip() for n in args.only.split(",") if n.strip()}
        unknown = wanted - {t.ep for t in targets}
        if unknown:
            parser.error(f"--only names unknown targets {sorted(unknown)}; targets: {[t.ep for t in targets]}")
        targets = [t for t in targets if t.ep in wanted]
    missing = regenerate(args.out_dir, targets, True if args.progress else None, config.targets)
    if missing and not args.allow_missing:
        print(
            f"could not generate reports for {[t.ep for t, _ in missing]}; install them or pass --allow-missing",
            file=sys.stderr,
        )
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
