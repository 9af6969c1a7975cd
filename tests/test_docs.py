"""The user guide against the repository: links, config names, script flags, page length.

Checks the kinds of mistake that recur when code moves under the docs (README.md and
docs/*.md), without importing JAX programs or compiling anything:

* every relative link resolves to an existing file, and its ``#anchor`` to a heading of that
  file (GitHub's heading slugs); a section named in prose as ``page.md, "Heading"`` exists;
* every config choice named as ``group=option`` (``network=gru``, ``env=popgym/repeat_first``,
  ``hydra/launcher=slurm``) is a file of ``configs/``, and every dotted key (``system.lr``,
  ``network.chrono_period``, ``logger.wandb.project``) is a field of the typed config or a key
  of the group's YAML files;
* every ``scripts/<name>.py`` and ``python -m stoixlite.<tool>`` named exists, and every
  ``--flag`` given to it is defined by that program; every file of ``stoixlite/``,
  ``tests/`` or ``configs/`` named exists;
* every registered env is named in docs/envs.md and every memory model in
  docs/memory_models.md;
* no page is longer than 400 lines, and no page uses words that mean nothing to a user;
* docs/index.md links every page; README's first screen is its two commands and what they do;
  README's and getting_started.md's training commands compose and parse; the counts the pages
  give of shipped configs, memory models and extras match the repository; memory_models.md's
  summary of the POPGym table holds for the generated table.
"""

from __future__ import annotations

import dataclasses
import re
import unicodedata
from functools import cache
from pathlib import Path

import pytest
import yaml

from stoixlite.cli.env_names import env_option_error
from stoixlite.config import schema

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MAX_LINES = 400

# Names the docs use as examples of what a user adds (docs/extending.md, docs/envs.md).
EXAMPLE_OPTIONS = {"network=my_elman", "env=toy/recall", "env=mine/my_env"}
# Launchers of Hydra and its plugins, not files of configs/ (docs/scaling.md).
HYDRA_BUILTINS = {"hydra/launcher=joblib", "hydra/launcher=submitit_local", "hydra/launcher=basic"}
FILE_SUFFIXES = {"py", "yaml", "md", "json", "jsonl", "txt", "png"}

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")
SECTION_REF = re.compile(r"\b((?:docs/)?[a-z_]+\.md|README)\)?,? \(?\"([^\"]+)\"")
OPTION = re.compile(
    r"(?<![\w./-])\+?(network|env|logger|distributed|protocol|checkpoint|arch|system|"
    r"hydra/launcher|hydra/sweeper|hydra/callbacks)=([A-Za-z0-9_./,-]+)"
)
DOTTED = re.compile(
    r"(?<![\w./-])\+?(arch|system|network|env|logger|checkpoint|distributed)"
    r"((?:\.[a-z_][a-z0-9_]*)+)(?=[=`\s,);:]|$)"
)
SCRIPT = re.compile(r"scripts/([a-z_]+)\.py")
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
INTERNAL = re.compile(
    r"\bsession\b|lent machine|device budget|device time|\baudit\b|\bthis task\b|"
    r"text added in commit|issue tracker|\bissue \d+|\bthe helper\b|a helper process|"
    # ownerless goals and the project's own jargon: say what was measured instead
    r"\bmission\b|throughput targets?|\btargets? (?:met|missed|stand)|\btarget: \d|"
    r"\btarget\b[^|.]*: met\b|\bwas not met\b|\(target \d",
    re.IGNORECASE,
)


def page_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


def prose_lines(path: Path) -> list[tuple[int, str, bool]]:
    """``(line number, text, inside a fenced code block)`` of a page."""
    out, fenced = [], False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        out.append((number, line, fenced))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    kept = []
    for char in text:
        if char in " -_" or char.isalnum():
            kept.append(char)
        elif unicodedata.category(char).startswith(("L", "N")):
            kept.append(char)
    return "".join(kept).replace(" ", "-")


@cache
def headings(path: Path) -> tuple[list[str], set[str]]:
    """The heading texts of a page and their anchors (repeated headings get ``-1``, ``-2``)."""
    texts, anchors, seen = [], set(), {}
    for _, line, fenced in prose_lines(path):
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if fenced or not match:
            continue
        texts.append(match.group(1))
        base = slug(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        anchors.add(base if count == 0 else f"{base}-{count}")
    return texts, anchors


@pytest.mark.parametrize("path", PAGES, ids=page_id)
def test_page_is_at_most_400_lines(path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{page_id(path)} has {lines} lines (at most {MAX_LINES})"


@pytest.mark.parametrize("path", PAGES, ids=page_id)
def test_relative_links_resolve(path):
    broken = []
    for number, line, fenced in prose_lines(path):
        if fenced:
            continue
        for target in LINK.findall(line):
            if re.match(r"^[a-z]+:", target):
                continue
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            if not dest.exists():
                broken.append(f"line {number}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in headings(dest)[1]:
                broken.append(f"line {number}: {target} (no heading with that anchor)")
    assert not broken, f"{page_id(path)}: " + "; ".join(broken)


@pytest.mark.parametrize("path", PAGES, ids=page_id)
def test_sections_named_in_prose_exist(path):
    lines = [(number, line) for number, line, fenced in prose_lines(path) if not fenced]
    missing = missing_sections(lines)
    assert not missing, f"{page_id(path)}: " + "; ".join(missing)


def missing_sections(lines) -> list[str]:
    """``page.md, "Heading"`` references among ``(number, text)`` lines whose heading is gone."""
    missing = []
    for number, line in lines:
        for page, section in SECTION_REF.findall(line):
            target = ROOT / "README.md" if page == "README" else ROOT / "docs" / Path(page).name
            if not target.exists():
                missing.append(f"line {number}: {page} (no such page)")
                continue
            texts = [re.sub(r"`", "", t).lower() for t in headings(target)[0]]
            if not any(t.startswith(section.lower()) for t in texts):
                missing.append(f'line {number}: {page}, "{section}" (no such heading)')
    return missing


CODE = [
    path
    for folder in ("configs", "stoixlite", "scripts", "tests")
    for path in sorted((ROOT / folder).rglob("*"))
    if path.suffix in {".py", ".yaml"} and path.name != "test_docs.py"
]


def test_sections_named_in_code_and_configs_exist():
    """Docstrings, comments and configs name doc sections the same way; they must exist too."""
    missing = []
    for path in CODE:
        lines = enumerate(path.read_text().splitlines(), 1)
        missing += [f"{page_id(path)} {m}" for m in missing_sections(lines) if ".md" in m]
    assert not missing, "; ".join(missing)


@cache
def yaml_keys(group: str) -> set[str]:
    """Every top-level key of the group's YAML files (``# @package _global_`` files nest it)."""
    keys: set[str] = set()
    files = list((ROOT / "configs").rglob("*.yaml"))
    for file in files:
        data = yaml.safe_load(file.read_text()) or {}
        if not isinstance(data, dict):
            continue
        if file.parent.name == group or group in file.relative_to(ROOT / "configs").parts[:1]:
            if "_global_" in file.read_text().split("\n", 1)[0]:
                data = data.get(group, {}) or {}
            keys.update(k for k in data if isinstance(k, str))
        elif isinstance(data.get(group), dict):
            keys.update(data[group])
    return keys


def dataclass_keys(cls) -> dict[str, object]:
    return {f.name: f for f in dataclasses.fields(cls)}


GROUP_CLASSES = {
    "arch": schema.ArchConfig,
    "system": schema.SystemConfig,
    "network": schema.NetworkConfig,
    "env": schema.EnvConfig,
    "logger": schema.LoggerConfig,
    "checkpoint": schema.CheckpointConfig,
    "distributed": schema.DistributedConfig,
}


def key_exists(group: str, parts: list[str]) -> bool:
    first = parts[0]
    if first in dataclass_keys(GROUP_CLASSES[group]) or first in yaml_keys(group):
        if group == "logger" and first == "wandb" and len(parts) > 1:
            return parts[1] in dataclass_keys(schema.WandbConfig)
        return True
    # a memory model's own key (configs/network/<model>.yaml) or an actor-critic key
    return group == "network" and first in yaml_keys("actor_critic")


@pytest.mark.parametrize("path", PAGES, ids=page_id)
def test_config_options_and_keys_exist(path):
    unknown = []
    for number, line, fenced in prose_lines(path):
        for group, options in OPTION.findall(line):
            for option in options.split(","):
                option = option.rstrip(".")
                named = f"{group}={option}"
                if not option or option.endswith("/") or option in {"...", "null"}:
                    continue
                if named in EXAMPLE_OPTIONS:
                    continue
                if named in HYDRA_BUILTINS or group in {"arch", "system", "checkpoint"}:
                    continue
                if group == "env" and env_option_error(option, ROOT / "configs") is None:
                    continue  # a file, or an id of a family with defaults (gymnasium, gymnax)
                if not (ROOT / "configs" / group / f"{option}.yaml").exists():
                    unknown.append(f"line {number}: {named}")
        for match in DOTTED.finditer(line):
            group, dotted = match.groups()
            parts = dotted.strip(".").split(".")
            if parts[-1] in FILE_SUFFIXES or (group == "env" and parts[0] == "kwargs"):
                continue
            # in code blocks only overrides (``key=value``): the rest is Python or a diagram
            if fenced and not line[match.end() :].startswith("="):
                continue
            if not key_exists(group, parts):
                unknown.append(f"line {number}: {group}{dotted}")
    assert not unknown, f"{page_id(path)} names config options or keys that do not exist: " + (
        "; ".join(unknown)
    )


MODULE = re.compile(r"-m (stoixlite(?:\.[a-z_]+)+)")


def program_files(name: str) -> list[Path]:
    """The source files of a program: ``scripts/<name>.py``, or the module ``stoixlite.<tool>``
    (a file, or every file of its package)."""
    if not name.startswith("stoixlite."):
        return [p for p in [ROOT / "scripts" / f"{name}.py"] if p.exists()]
    path = ROOT / name.replace(".", "/")
    return sorted(path.rglob("*.py")) if path.is_dir() else [path.with_suffix(".py")]


def script_exists(name: str) -> bool:
    return any(p.exists() for p in program_files(name))


@cache
def program_source(name: str) -> str:
    shared = (ROOT / "stoixlite" / "cli" / "args.py").read_text()
    return "".join(p.read_text() for p in program_files(name)) + shared


def commands(path: Path) -> list[tuple[int, str]]:
    """Each command line of a page with its backslash continuations joined."""
    out, pending, start = [], "", 0
    for number, line, _ in prose_lines(path):
        if not pending:
            start = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        out.append((start, pending + line))
        pending = ""
    return out


@pytest.mark.parametrize("path", PAGES, ids=page_id)
def test_scripts_and_their_flags_exist(path):
    unknown = []
    for number, line in commands(path):
        for span in re.split(r"`{1,3}", line):
            programs = SCRIPT.findall(span) + MODULE.findall(span)
            missing = [n for n in programs if not script_exists(n)]
            unknown += [f"line {number}: {n} (no such script or module)" for n in missing]
            if missing or len(set(programs)) != 1 or not re.search(r"python|scripts/", span):
                continue
            source = program_source(programs[0])
            for flag in FLAG.findall(span):
                if f'"{flag}"' not in source and f"'{flag}'" not in source:
                    unknown.append(f"line {number}: {programs[0]} {flag}")
    assert not unknown, f"{page_id(path)}: " + "; ".join(unknown)


REPO_PATH = re.compile(
    r"(?<![\w/.<-])((?:stoixlite|tests|scripts|configs)/[\w./-]*\.(?:py|yaml))\b"
)


@pytest.mark.parametrize("path", PAGES, ids=page_id)
def test_files_named_exist(path):
    """``tests/test_x.py``, ``stoixlite/...py``, ``configs/...yaml`` named on a page exist."""
    missing = [
        f"line {number}: {name}"
        for number, line, _ in prose_lines(path)
        for name in REPO_PATH.findall(line)
        if not (ROOT / name).exists() and not any(e in name for e in ("my_", "toy/", "mine/"))
    ]
    assert not missing, f"{page_id(path)} names files that do not exist: " + "; ".join(missing)


@pytest.mark.parametrize("path", PAGES, ids=page_id)
def test_no_internal_vocabulary(path):
    found = [
        f"line {number}: {match.group(0)!r}"
        for number, line, _ in prose_lines(path)
        for match in INTERNAL.finditer(line)
    ]
    assert not found, f"{page_id(path)} uses words that mean nothing to a user: " + "; ".join(found)


def named_in(text: str, name: str) -> bool:
    """``suite/name`` written out, or ``name`` inside a ``suite/{a, b, ...}`` list of the page."""
    if f"`{name}`" in text or f"{name}`" in text or f"{name}," in text:
        return True
    suite, _, short = name.partition("/")
    return any(short in group.split(", ") for group in re.findall(rf"{suite}/\{{([^}}]*)\}}", text))


def test_every_registered_env_is_documented():
    from stoixlite.envs.registry import available_envs

    text = re.sub(r"\s+", " ", (ROOT / "docs" / "envs.md").read_text())
    missing = [name for name in available_envs() if not named_in(text, name)]
    assert not missing, f"docs/envs.md does not name the registered envs {missing}"


def test_every_memory_model_is_documented():
    from stoixlite.networks.memory import available_memories

    text = (ROOT / "docs" / "memory_models.md").read_text()
    missing = [name for name in available_memories() if f"`{name}`" not in text]
    assert not missing, f"docs/memory_models.md does not name the memory models {missing}"


def test_the_checks_catch_what_they_are_for(tmp_path):
    """Negative controls: a broken anchor, an unknown key and an unknown option are found."""
    assert slug("Craftax (`craftax/<variant>`)") == "craftax-craftaxvariant"
    assert slug("Weights & Biases") == "weights--biases"
    assert not key_exists("system", ["no_such_key"])
    assert key_exists("system", ["lr"]) and key_exists("network", ["chrono_period"])
    assert key_exists("logger", ["wandb", "project"]) and not key_exists("logger", ["wandb", "x"])
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[a](page.md#title) [b](page.md#nope) `network=nope`\n")
    assert "title" in headings(page)[1] and "nope" not in headings(page)[1]
    assert OPTION.findall("`network=nope`") == [("network", "nope")]
    assert not (ROOT / "configs" / "network" / "nope.yaml").exists()
    assert '"--repeats"' in program_source("stoixlite.benchmark")
    assert '"--no-such-flag"' not in program_source("stoixlite.benchmark")
    assert MODULE.findall("python -m stoixlite.benchmark --suite gpu") == ["stoixlite.benchmark"]
    assert script_exists("stoixlite.evaluate") and not script_exists("stoixlite.nope")
    assert named_in("`popgym/{repeat_first, count_recall}`", "popgym/count_recall")
    assert not named_in("`popgym/{repeat_first, count_recall}`", "popgym/autoencode")


def test_the_index_links_every_page():
    index = ROOT / "docs" / "index.md"
    linked = {
        (index.parent / target.partition("#")[0]).resolve()
        for _, line, fenced in prose_lines(index)
        if not fenced
        for target in LINK.findall(line)
    }
    pages = {p.resolve() for p in (ROOT / "docs").glob("*.md")} - {index.resolve()}
    missing = sorted(str(p.relative_to(ROOT)) for p in pages - linked)
    assert not missing, f"docs/index.md does not link {missing}"


def readme_first_screen() -> str:
    text = (ROOT / "README.md").read_text()
    return text[: text.index("\n## ")]


def test_readme_first_screen_is_the_two_commands_and_what_they_do():
    screen = readme_first_screen()
    blocks = re.findall(r"```bash\n(.*?)```", screen, re.S)
    assert len(blocks) == 1, "README's first screen has one block of commands"
    commands = [line for line in blocks[0].splitlines() if line.strip()]
    assert commands == [
        'pip install -e ".[dev]" && python -m stoixlite.rec_ppo network=gru '
        "env=popgym/repeat_previous",
        "pytest",
    ]
    prose = re.sub(r"```.*?```", "", screen, flags=re.S)
    assert "first command" in prose and "second" in prose  # what each does
    found = re.findall(r"\bCI\b|\.ci/|workflows?\b|github", prose, re.IGNORECASE)
    assert not found, f"README's first screen talks about CI: {found}"
    assert len(screen.splitlines()) <= 16, "README's first screen fits a screen"


def training_commands(path: Path) -> list[tuple[int, list[str]]]:
    """``(line, arguments)`` of every ``python -m stoixlite.rec_ppo`` in the page's code blocks
    (comments dropped, a ``&&`` chain's rec_ppo part), except those with placeholders."""
    import shlex

    found = []
    for number, line, fenced in prose_lines(path):
        if not fenced or "python -m stoixlite.rec_ppo" not in line:
            continue
        command = line.split("python -m stoixlite.rec_ppo", 1)[1].split(" #", 1)[0]
        args = shlex.split(command.rstrip("\\ "))
        if not any("<" in a or a.endswith("\\") for a in args):
            found.append((number, args))
    return found


@pytest.mark.parametrize("page", ["README.md", "docs/getting_started.md"])
def test_the_training_commands_compose_and_parse(page):
    """Each command is checked as the entry point checks it before anything compiles: its
    overrides (Hydra composes them; a multirun's options exist) and, for a single run whose
    env's optional packages are installed, the typed config."""
    from stoixlite.cli.overrides import composed_or_error, plain_overrides
    from stoixlite.config.parse import parse
    from stoixlite.envs.host import is_host_env
    from stoixlite.envs.registry import missing_modules

    commands = training_commands(ROOT / page)
    assert len(commands) >= 5
    bad = []
    for number, args in commands:
        cfg, error = composed_or_error(plain_overrides(args, ROOT / "configs"), ROOT / "configs")
        if error is not None:
            bad.append(f"line {number}: {error}")
            continue
        if cfg is None:  # a multirun: its options were checked
            continue
        name = str(cfg.env.name)
        if not is_host_env(name) and missing_modules(name):
            continue
        try:
            parse(cfg)
        except Exception as err:  # ConfigError, or a host env's HostEnvError
            bad.append(f"line {number}: {err}")
    assert not bad, f"{page}: " + "; ".join(bad)


NUMBER_WORDS = {"two": 2, "thirteen": 13, "sixteen": 16, "twenty-one": 21, "twenty-four": 24}


def as_number(word: str) -> int:
    return int(word.replace(",", "")) if word[0].isdigit() else NUMBER_WORDS[word.lower()]


def test_counts_of_shipped_configs_and_models_match_the_repository():
    """The counts the pages state: the (env, network) files configuration.md lists (each named),
    README's memory models and POPGym envs."""
    from stoixlite.networks.memory import available_memories, is_stateless, memory_class

    pairs = sorted((ROOT / "configs" / "env_network").rglob("*.yaml"))
    text = (ROOT / "docs" / "configuration.md").read_text()
    stated = re.search(r"Shipped: (\w+) files", text)
    assert stated and as_number(stated.group(1)) == len(pairs), "configuration.md's count"
    flat = re.sub(r"\s+", " ", text)
    for path in pairs:
        stem = path.stem
        prefix, _, model = stem.rpartition("_")
        listed = re.search(rf"`{re.escape(prefix)}_\{{([^}}]*)\}}`", flat)
        named = f"`{stem}`" in flat or bool(listed and model in listed.group(1).split(", "))
        assert named, f"configuration.md does not name configs/env_network/.../{path.name}"
    readme = (ROOT / "README.md").read_text()
    models = {memory_class(n) for n in available_memories() if not is_stateless(n)}
    stated = re.search(r"(\S+) memory models \(", readme)
    assert stated and as_number(stated.group(1)) == len(models), "README's memory models"
    ports = list((ROOT / "configs" / "env" / "popgym").glob("*.yaml"))
    stated = re.search(r"the (\w+) POPGym environments", readme)
    assert stated and as_number(stated.group(1)) == len(ports), "README's POPGym envs"


def test_every_extra_is_in_the_extras_table():
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    text = (ROOT / "docs" / "getting_started.md").read_text()
    rows = set(re.findall(r"^\| `([a-z0-9_]+)`", text, re.M))
    rows |= {
        n for row in re.findall(r"^\| `([a-z0-9_]+)` / `([a-z0-9_]+)`", text, re.M) for n in row
    }
    missing = sorted(set(extras) - rows)
    assert not missing, f"getting_started.md's extras table lacks {missing}"


def table_cells(env: str, difficulty: str) -> dict[str, str]:
    """The main table of docs/popgym_table.md (generated from the records): a row's cells by
    column."""
    lines = (ROOT / "docs" / "popgym_table.md").read_text().splitlines()
    header = next(line for line in lines if line.startswith("| env | difficulty | random |"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    for line in lines[lines.index(header) :]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[:2] == [env, difficulty]:
            return dict(zip(columns, cells, strict=True))
    raise KeyError((env, difficulty))


def mean(cell: str) -> float:
    return float(cell.split()[0])


def test_memory_models_summary_of_the_table_holds():
    """docs/memory_models.md's "Choosing one" sums up the generated table's gru and memoroid
    columns on the repeat tasks without its numbers: this checks the summary against them."""
    text = re.sub(r"\s+", " ", (ROOT / "docs" / "memory_models.md").read_text())
    assert "gru solves repeat_first at every difficulty and repeat_previous easy" in text
    solved = 0.99
    for level in ("easy", "medium", "hard"):
        assert mean(table_cells("repeat_first", level)["gru"]) >= solved
    assert mean(table_cells("repeat_previous", "easy")["gru"]) >= solved
    assert "memoroid solves repeat_first easy and repeat_previous easy, falls short on" in text
    assert mean(table_cells("repeat_first", "easy")["memoroid"]) >= solved
    assert mean(table_cells("repeat_previous", "easy")["memoroid"]) >= solved
    assert mean(table_cells("repeat_first", "medium")["memoroid"]) < solved
    hard = table_cells("repeat_first", "hard")
    assert "no better than `mlp` on repeat_first hard" in text
    assert mean(hard["memoroid"]) <= mean(hard["mlp"]) + 0.05
    assert "neither solves repeat_previous medium or hard (lmu" in text
    for level in ("medium", "hard"):
        row = table_cells("repeat_previous", level)
        assert max(mean(row["gru"]), mean(row["memoroid"])) < solved
        assert row["best stoixlite (model)"].endswith("(lmu)")
