"""Local rows for lmms-eval's own built-in video tasks, so that `lmms-eval --model cader --tasks videomme_long,...`
runs offline through lmms-eval's unchanged task YAMLs (docs/lmms_eval.md, "Offline data").

    python -m cader.evaluate.lmms.local_data --data_root DATA --out LMMS_HOME
    cd LMMS_HOME && HF_HOME=$PWD/hf_home HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 lmms-eval --model cader --tasks ...

How lmms-eval 0.7.3 finds a task's data (lmms_eval/api/task.py, ConfigurableTask.download): for a video task
(`dataset_kwargs.video: True`) it downloads nothing when `$HF_HOME/<dataset_kwargs.cache_dir>` exists, then calls
`datasets.load_dataset(<dataset_path>, ...)`; datasets reads a `dataset_path` that names an existing folder
(relative to the working directory) as that folder's data files before it asks the Hub (datasets/load.py,
dataset_module_factory: "Try locally"), the split named by each file (`data/<split>-00000-of-00001.parquet`).
So a folder named like each task's `dataset_path` holding its rows, read from the working directory, and the videos
where each task's `doc_to_visual` looks under `$HF_HOME`, are all lmms-eval needs: no YAML is changed, nothing is
downloaded. Each row has the fields and value types the task's utils read (tests/fixtures/lmms_local_data/
PROVENANCE.md); videos (and subtitles) are symbolic links to the files in the cader data root.

Per dataset (`--datasets`, default: every one whose folder is under `--data_root`): its source folder under
`--data_root` -> its rows at `<out>/<dataset_path>` (split) and its videos at `<out>/hf_home/<cache_dir>/...`
(`HF_HOME_DIR`: apart from the rows, because lmms-eval reads a `--tasks` value naming a folder of the working
directory as a folder of task YAMLs, and the video folders are named like the tasks: `lvbench/`); the built-in
tasks that read them:

- videomme: `videomme/` -> lmms-eval/Video-MME (test), `videomme/data/<videoID>.mp4`; videomme, videomme_long
- videomme_v2: `videomme_v2/` (the release: test.parquet, videos unzipped, subtitle/) -> MME-Benchmarks/Video-MME-v2
  (test), `videomme_v2/<video_id>.mp4`, `videomme_v2/subtitle/`; videomme_v2, videomme_v2_reasoning,
  videomme_v2_w_subtitle
- mlvu_dev: `mlvu/` -> sy1998/MLVU_dev (test), `mlvu/<n>_<task>/<video>`; mlvu_dev
- lvbench: `lvbench/` -> lmms-eval/LVBench (train), `lvbench/<key>.mp4`; lvbench
- longvideobench: `longvideobench/` -> longvideobench/LongVideoBench (validation), `datasets/longvideobench/videos/`
  and `subtitles/`; longvideobench_val_v, longvideobench_val_i

Video-MME and Video-MME-v2 rows are the release files themselves (they are what lmms-eval downloads). MLVU and
LVBench rows are written from cader's own loaders' samples (so each row's question, options and gold are the ones
`cader eval` asks), LongVideoBench rows from the release's lvb_val.json with `candidates` spread over
`option0`..`option4` ("N/A" past the last). A row that cannot be written (a loader row error, more than five
LongVideoBench candidates, a path leaving its folder) and a video that is not there are each named; the command
then exits 1, having written the rest.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from cader.cli.function_cli import call_arguments, function_parser
from cader.evaluate.benchmarks import load_benchmark, video_path
from cader.evaluate.benchmarks.base import LETTERS, read_json_rows
from jsonargparse import ArgumentParser

MANIFEST = "cader_local_data.json"
VIDEO_SUFFIXES = (".mp4", ".MP4", ".mkv")  # lmms-eval's videomme_doc_to_visual tries these, in this order
LVB_OPTIONS = 5  # longvideobench_doc_to_text reads option0..option4


@dataclass
class Built:
    """One dataset's local form: `rows` to write (or `copies`, release parquet files written as they are), `links`
    (path under --out -> the file it points at) and `problems` (one line each: what was left out or is missing)."""

    rows: list[dict] | None = None
    copies: list[Path] = field(default_factory=list)
    links: dict[str, Path] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class LocalDataset:
    """Where one lmms-eval dataset's rows and videos go (facts from lmms-eval 0.7.3's task YAMLs and utils)."""

    key: str
    folder: str  # under --data_root
    dataset_path: str  # the built-in YAMLs' `dataset_path`
    split: str  # their `test_split`
    cache_dir: str  # their `dataset_kwargs.cache_dir`: the videos' folder under $HF_HOME
    tasks: tuple[str, ...]  # built-in tasks that read these rows
    build: Callable[[Path, Path], Built]  # (data_root, data_root/folder) -> Built


def plain_relative(text, what: str) -> str:
    """`text` as a relative path inside its folder; ValueError for an absolute path or one with '..'."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{what} {text!r} is not a file name")
    path = PurePosixPath(text.replace("\\", "/"))
    if path.is_absolute() or ".." in path.parts:
        raise ValueError(f"{what} {text!r} leaves its folder")
    return str(path)


def lettered_question(stem: str, options: list[str]) -> str:
    """"stem\\n(A) x\\n(B) y": how LVBench and MLVU rows carry their options inside `question`."""
    return stem + "".join(f"\n({LETTERS[i]}) {option}" for i, option in enumerate(options))


def _parquet_column(path: Path, column: str) -> list:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    if column not in table.column_names:
        raise ValueError(f"{path}: no {column!r} column (columns: {', '.join(table.column_names)})")
    return table.column(column).to_pylist()


def build_videomme(data_root: Path, root: Path) -> Built:
    """The release parquet files as they are; each videoID's file (.mp4, .MP4 or .mkv) under data/."""
    built = Built(copies=sorted((root / "videomme").glob("*.parquet")))
    if not built.copies:
        raise FileNotFoundError(f"{root / 'videomme'}: no *.parquet (the lmms-lab/Video-MME release layout)")
    for parquet in built.copies:
        for number, video_id in enumerate(_parquet_column(parquet, "videoID")):
            try:
                name = plain_relative(video_id, "videoID")
            except ValueError as exc:
                built.problems.append(f"{parquet}: row {number}: {exc}")
                continue
            found = [root / "data" / f"{name}{suffix}" for suffix in VIDEO_SUFFIXES]
            video = next((path for path in found if path.is_file()), None)
            if video is None:
                built.problems.append(f"{parquet}: row {number}: no video {found[0]} (nor .MP4/.mkv)")
            else:
                built.links[f"videomme/data/{video.name}"] = video
    return built


def build_videomme_v2(data_root: Path, root: Path) -> Built:
    """The release's test.parquet as it is; `<video_id>.mp4` found anywhere under the folder (the release zips
    unpacked), `subtitle/<video_id>.jsonl` when there."""
    parquet = root / "test.parquet"
    if not parquet.is_file():
        raise FileNotFoundError(f"{parquet}: not found (the MME-Benchmarks/Video-MME-v2 release layout)")
    built = Built(copies=[parquet])
    videos = {path.stem: path for path in sorted(root.rglob("*.mp4"))}
    for number, video_id in enumerate(_parquet_column(parquet, "video_id")):
        try:
            name = plain_relative(str(video_id), "video_id")
        except ValueError as exc:
            built.problems.append(f"{parquet}: row {number}: {exc}")
            continue
        if name not in videos:
            built.problems.append(f"{parquet}: row {number}: no {name}.mp4 under {root}")
            continue
        built.links[f"videomme_v2/{name}.mp4"] = videos[name]
        subtitle = root / "subtitle" / f"{name}.jsonl"
        if subtitle.is_file():
            built.links[f"videomme_v2/subtitle/{name}.jsonl"] = subtitle
    return built


def build_longvideobench(data_root: Path, root: Path) -> Built:
    """lvb_val.json's rows with `candidates` as option0..option4 ("N/A" past the last), as the Hugging Face rows
    lmms-eval reads; videos under videos/, subtitles under subtitles/."""
    file = root / "lvb_val.json"
    if not file.is_file():
        raise FileNotFoundError(f"{file}: not found (the longvideobench/LongVideoBench release layout)")
    built = Built(rows=[])
    for number, row in enumerate(read_json_rows(file)):
        try:
            if not isinstance(row, dict):
                raise TypeError("not a JSON object")
            candidates = row.get("candidates")
            if not isinstance(candidates, list) or not 1 <= len(candidates) <= LVB_OPTIONS:
                raise ValueError(f"candidates {candidates!r:.60} is not a list of 1 to {LVB_OPTIONS} options "
                                 "(lmms-eval's rows have option0..option4)")
            video = plain_relative(row.get("video_path"), "video_path")
        except (TypeError, ValueError) as exc:
            built.problems.append(f"{file}: row {number}: {exc}; not written")
            continue
        options = {f"option{i}": candidates[i] if i < len(candidates) else "N/A" for i in range(LVB_OPTIONS)}
        built.rows.append({**{k: v for k, v in row.items() if k != "candidates"}, **options})
        if (root / "videos" / video).is_file():
            built.links[f"datasets/longvideobench/videos/{video}"] = root / "videos" / video
        else:
            built.problems.append(f"{file}: row {number}: no video {root / 'videos' / video}")
        subtitle = row.get("subtitle_path")
        if isinstance(subtitle, str) and (root / "subtitles" / subtitle).is_file():
            built.links[f"datasets/longvideobench/subtitles/{plain_relative(subtitle, 'subtitle_path')}"] = (
                root / "subtitles" / subtitle)
    return built


def _from_loader(benchmark: str, data_root: Path, row_of: Callable) -> Built:
    """Rows from cader's own loader: `row_of(sample, video)` -> (row, path under --out); loader errors named."""
    samples, errors = load_benchmark(benchmark, data_root)
    built = Built(rows=[], problems=[f"{error}; not written" for error in errors])
    for sample in samples:
        video = video_path(sample, data_root)
        row, link = row_of(sample, video)
        built.rows.append(row)
        if video.is_file():
            built.links[link] = video
        else:
            built.problems.append(f"{benchmark} {sample.sample_id}: no video {video}")
    return built


def mlvu_row(sample, video: Path) -> tuple[dict, str]:
    """An MLVU_dev row: options inside `question`, the official scorer's gold letter, the task from its file."""
    video_name = f"{video.parent.name}/{video.name}"  # MLVU/video/<n>_<task>/<video>
    row = {"video_name": video_name, "duration": sample.duration, "question": lettered_question(sample.question,
           sample.options), "answer": sample.answer, "task_type": sample.meta.get("task_type"),
           "question_type": sample.meta.get("question_type")}
    return row, f"mlvu/{video_name}"


def lvbench_row(sample, video: Path) -> tuple[dict, str]:
    """An LVBench row: options inside `question` (as the release writes them), `video_path` = `<key>.mp4`."""
    key = plain_relative(str(sample.meta.get("key")), "key")
    uid = int(sample.sample_id) if sample.sample_id.isdigit() else sample.sample_id
    row = {"uid": uid, "key": key, "video_path": f"{key}.mp4", "duration": sample.duration,
           "question": lettered_question(sample.question, sample.options), "answer": sample.answer,
           "question_type": sample.meta.get("question_type"), "time_reference": sample.meta.get("time_reference")}
    return row, f"lvbench/{key}.mp4"


DATASETS = {d.key: d for d in (
    LocalDataset("videomme", "videomme", "lmms-eval/Video-MME", "test", "videomme", ("videomme", "videomme_long"),
                 build_videomme),
    LocalDataset("videomme_v2", "videomme_v2", "MME-Benchmarks/Video-MME-v2", "test", "videomme_v2",
                 ("videomme_v2", "videomme_v2_reasoning", "videomme_v2_w_subtitle"), build_videomme_v2),
    LocalDataset("mlvu_dev", "mlvu", "sy1998/MLVU_dev", "test", "mlvu", ("mlvu_dev",),
                 lambda data_root, root: _from_loader("mlvu_dev", data_root, mlvu_row)),
    LocalDataset("lvbench", "lvbench", "lmms-eval/LVBench", "train", "lvbench", ("lvbench",),
                 lambda data_root, root: _from_loader("lvbench", data_root, lvbench_row)),
    LocalDataset("longvideobench", "longvideobench", "longvideobench/LongVideoBench", "validation",
                 "datasets/longvideobench", ("longvideobench_val_v", "longvideobench_val_i"), build_longvideobench),
)}


def _write_parquet(rows: list[dict], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(pa.Table.from_pylist(rows), tmp)
    os.replace(tmp, path)


HF_HOME_DIR = "hf_home"  # under --out: HF_HOME of the lmms-eval run, holding each task's video folder (cache_dir)


def _link(out: Path, relative: str, target: Path) -> None:
    """A symbolic link `out/relative` -> target (replacing an older link; never a file that is not a link)."""
    path = out / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink():
        path.unlink()
    elif path.exists():
        raise FileExistsError(f"{path} exists and is not a link this command made; remove it or pick another --out")
    path.symlink_to(target.resolve())


def write_dataset(spec: LocalDataset, built: Built, out: Path) -> int:
    """Write one dataset's rows (replacing the split's older files) and links; returns the row count."""
    import pyarrow.parquet as pq

    outside = [link for link in built.links if not link.startswith(f"{spec.cache_dir}/")]
    if outside:  # a builder's slip: lmms-eval would never look there
        raise RuntimeError(f"{spec.key}: links outside its cache_dir {spec.cache_dir}: {outside[:3]}")
    (out / HF_HOME_DIR / spec.cache_dir).mkdir(parents=True, exist_ok=True)  # lmms-eval downloads when it is missing

    data = out / spec.dataset_path / "data"
    data.mkdir(parents=True, exist_ok=True)
    for old in data.glob("*.parquet"):  # an earlier run's split files: datasets would read them too
        old.unlink()
    if built.rows is not None:
        _write_parquet(built.rows, data / f"{spec.split}-00000-of-00001.parquet")
        count = len(built.rows)
    else:
        count = 0
        for i, source in enumerate(built.copies):
            shutil.copyfile(source, data / f"{spec.split}-{i:05d}-of-{len(built.copies):05d}.parquet")
            count += pq.read_metadata(source).num_rows
    for relative, target in sorted(built.links.items()):
        _link(out / HF_HOME_DIR, relative, target)
    return count


def write_local_data(data_root: str, out: str, datasets: list[str] | None = None) -> dict:
    """Write local rows and video links for lmms-eval's built-in video tasks, to run them offline through their own
    YAMLs (docs/lmms_eval.md, "Offline data").

    Args:
        data_root: the cader data root holding the benchmark folders (videomme/, mlvu/, lvbench/, longvideobench/,
            videomme_v2/)
        out: the folder to write into; run lmms-eval from it with HF_HOME set to its hf_home/ (`run_command`)
        datasets: which datasets (videomme, videomme_v2, mlvu_dev, lvbench, longvideobench); default: every one
            whose folder is under data_root

    Returns:
        The manifest written to <out>/cader_local_data.json: per dataset its dataset_path, split, rows, links,
        tasks and problems.
    """
    root, target = Path(data_root), Path(out)
    unknown = sorted(set(datasets or ()) - set(DATASETS))
    if unknown:
        raise ValueError(f"--datasets: unknown {', '.join(unknown)} (known: {', '.join(DATASETS)})")
    chosen = list(datasets) if datasets else [k for k, spec in DATASETS.items() if (root / spec.folder).is_dir()]
    if not chosen:
        raise FileNotFoundError(f"{root}: none of the folders {', '.join(s.folder for s in DATASETS.values())}")
    manifest = {}
    for key in chosen:
        spec = DATASETS[key]
        if not (root / spec.folder).is_dir():
            raise FileNotFoundError(f"{root / spec.folder}: no such folder (--datasets {key})")
        built = spec.build(root, root / spec.folder)
        rows = write_dataset(spec, built, target)
        manifest[key] = {"dataset_path": spec.dataset_path, "split": spec.split, "rows": rows,
                         "links": len(built.links), "tasks": list(spec.tasks), "source": str(root / spec.folder),
                         "problems": built.problems}
    (target / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def run_command(out: str, manifest: dict) -> str:
    """The offline lmms-eval command line for what was written."""
    tasks = ",".join(spec_task for entry in manifest.values() for spec_task in entry["tasks"][:1])
    # HF_HOME also moves the Hub cache: HF_HUB_CACHE keeps the models' where it was
    return (f"cd {out} && HF_HOME=$PWD/{HF_HOME_DIR} HF_HUB_CACHE=${{HF_HUB_CACHE:-$HOME/.cache/huggingface/hub}} "
            f"HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 lmms-eval --model cader "
            f"--model_args model=MODEL,... --tasks {tasks} --output_path runs --log_samples --batch_size 1")


def build_parser(prog: str | None = None) -> ArgumentParser:
    """The flags of the recipe: `write_local_data`'s parameters."""
    return function_parser(write_local_data, prog or "python -m cader.evaluate.lmms.local_data", several=("datasets",))


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Write, print each dataset's counts, its problems and the lmms-eval command; exit 2 on a missing or unknown
    input, 1 when a row or video was left out, else 0.

    argv: the flags (default: sys.argv[1:]).
    prog: the program name the usage shows.
    """
    args = call_arguments(build_parser(prog), argv)
    try:
        manifest = write_local_data(**args)
    except (FileNotFoundError, FileExistsError, ValueError, TypeError) as exc:  # pyarrow's errors are these too
        print(f"lmms local data: error: {exc}", file=sys.stderr)
        return 2
    problems = 0
    for key, entry in manifest.items():
        for problem in entry["problems"]:
            print(f"lmms local data: {key}: {problem}", file=sys.stderr)
        problems += len(entry["problems"])
        print(f"{key}: {entry['rows']} rows -> {args['out']}/{entry['dataset_path']} (split {entry['split']}), "
              f"{entry['links']} video/subtitle links; tasks {', '.join(entry['tasks'])}")
    print(run_command(args["out"], manifest))
    if problems:
        print(f"lmms local data: {problems} rows or videos left out or missing (listed above)", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
