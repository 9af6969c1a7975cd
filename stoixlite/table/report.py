"""``python -m stoixlite.table report``: the table's page, the page of every trained model and
the figure from the records alone (no run directory needed), and the README's summary block
where asked.

Reads every record below the records folder (:mod:`stoixlite.results.popgym_records`), the
random policy's returns kept beside them (``random.json``, computed once per cell and added
there) and the paper's numbers (:mod:`stoixlite.results.popgym_paper`); the numbers are
:mod:`stoixlite.results.popgym_cells`', the text :mod:`stoixlite.results.popgym_page`'s, the
figure :mod:`stoixlite.results.popgym_figure`'s.
"""

from __future__ import annotations

from pathlib import Path

from stoixlite.results.popgym_cells import load_cells
from stoixlite.results.popgym_figure import figure as draw_figure
from stoixlite.results.popgym_page import (
    README_END,
    README_START,
    readme_block,
    render,
)
from stoixlite.results.popgym_paper import DIFFICULTIES, ENVS
from stoixlite.results.popgym_records import (
    RecordError,
    read_randoms,
    read_records,
    write_randoms,
)
from stoixlite.results.popgym_runs_page import render_runs

PAGE = "popgym_table.md"
FIGURE = Path("img") / "popgym_table.png"


def runs_page(doc: Path) -> Path:
    """Where the page of every trained model goes by default: beside ``doc`` as
    ``<doc>_runs.md`` (docs/popgym_table.md -> docs/popgym_table_runs.md)."""
    return doc.with_name(f"{doc.stem}_runs.md")


def _link(target: Path, page: Path) -> str:
    """``target`` as a link from ``page``: relative to the page's folder where it lies below it."""
    try:
        return str(target.resolve().relative_to(page.resolve().parent))
    except ValueError:
        return str(target)


def write_report(
    records: Path,
    doc: Path,
    figure: Path,
    runs_doc: Path | None = None,
    readme: Path | None = None,
    random_episodes: int = 512,
    source: str | None = None,
) -> int:
    """Write the table's page ``doc``, the page of every trained model (``runs_doc``, default
    :func:`runs_page`), the figure and, when ``readme`` is given, the README's block between
    :data:`~stoixlite.results.popgym_page.README_START` and ``README_END``, from the records
    below ``records``; the random policy's return of each cell missing from ``random.json`` is
    computed (``random_episodes`` episodes; 0: left out) and added to it. Prints the files it
    wrote. Exit 2 with one line when there is nothing to report or a file cannot be read or
    written. ``source``: the records folder as the pages name it (default: ``records``)."""
    source = f"{source or records}/".replace("//", "/")
    try:
        cells = load_cells(read_records(records))
        randoms = read_randoms(records)
    except RecordError as err:
        print(f"error: {err}")
        return 2
    if not records.is_dir():
        print(f"error: --records {records} is not a directory")
        return 2
    missing = [(e, d) for e in ENVS for d in DIFFICULTIES if f"{e}/{d}" not in randoms]
    if missing and random_episodes > 0:
        from stoixlite.results.random_policy import random_returns

        for env, difficulty in missing:
            returns = random_returns(f"popgym/{env}", difficulty, random_episodes)
            randoms[f"{env}/{difficulty}"] = float(returns.mean())
        error = write_randoms(records, randoms)
        if error:
            print(f"error: {error}")
            return 2
    try:
        drawn = draw_figure(cells, figure)
        if not drawn and figure.exists():
            figure.unlink()  # a figure of records no longer there
    except OSError as err:
        print(f"error: cannot write --figure {figure}: {err.strerror or err}")
        return 2
    rel = _link(figure, doc) if drawn else None
    runs_doc = runs_page(doc) if runs_doc is None else runs_doc
    try:
        doc.parent.mkdir(parents=True, exist_ok=True)
        doc.write_text(render(cells, randoms, rel, _link(runs_doc, doc), source))
    except OSError as err:
        print(f"error: cannot write --doc {doc}: {err.strerror or err}")
        return 2
    try:
        runs_doc.write_text(render_runs(cells, _link(doc, runs_doc), source))
    except OSError as err:
        print(f"error: cannot write --runs-doc {runs_doc}: {err.strerror or err}")
        return 2
    wrote = [str(doc), str(runs_doc)] + ([str(figure)] if drawn else [])
    if readme is not None:
        image = _link(figure, readme) if drawn else None
        error = update_readme(readme, readme_block(cells, image))
        if error:
            print(f"error: {error}")
            return 2
        wrote.append(str(readme))
    print("wrote " + ", ".join(wrote))
    return 0


def update_readme(path: Path, block: str) -> str | None:
    """Replace the block between the markers in ``path``; ``None``, or one line saying why not."""
    try:
        text = path.read_text()
    except OSError as err:
        return f"cannot read --readme {path}: {err.strerror or err}"
    start, end = text.find(README_START), text.find(README_END)
    if start < 0 or end < start:
        return f"--readme {path} has no block between {README_START!r} and {README_END!r}"
    try:
        path.write_text(text[:start] + block + text[end + len(README_END) :])
    except OSError as err:
        return f"cannot write --readme {path}: {err.strerror or err}"
    return None


def mark_changed_settings(root: Path) -> None:
    """Set each record's ``settings_changed`` to the keys whose value in its config differs from
    the cell's shipped config today (:func:`~stoixlite.results.popgym_records.changed_settings`;
    removed when none does), so that the page marks the results of earlier settings. Records
    that cannot be read are left to the report, which names them."""
    from stoixlite.cli.args import checked_run_config
    from stoixlite.results.popgym_records import changed_settings, read_record, write_record
    from stoixlite.table.cells import shipped_overrides

    for path in sorted(root.glob("*/*/*.json")):
        try:
            record = read_record(path)
        except RecordError:
            continue
        overrides = [
            *shipped_overrides(record["env"], record["difficulty"], record["model"]),
            *record.get("overrides", []),
        ]
        cfg, _ = checked_run_config(overrides)
        changed = changed_settings(record, cfg) if cfg is not None else ["config"]
        if changed != record.get("settings_changed", []):
            if changed:
                record["settings_changed"] = changed
            else:
                record.pop("settings_changed")
            write_record(path, record)
