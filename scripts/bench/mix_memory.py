"""B11: the SFT mix as Arrow tables (SFTDataModule) vs as Python objects (the mix before, scripts/bench/dict_mix.py):
resident memory per rank once the mix is ready, and cold / warm planning time.

The mix: `rows` rows (default 200,000) in the LongVT-Parquet layout, the five tool-free files at the release's
proportions (165,575 / 5,238 / 54,500 / 2,800 / 602), each row a system turn, a user turn with one media part and a
question, and an assistant turn with a chain of thought of realistic length; one row in 97 calls a tool and one in
211 has an empty answer (a row error), so the filter and the error counts have work. Every row names one of a
handful of small media files (four videos, four images): what is measured is row reading, filtering, planning and
caching, not media probing.

Planning (`--planner headers`, the default): `plan_budget`, the budget arithmetic of `SampleEncoder.plan`, with
each distinct media header probed once per process and text tokens counted as characters / 4, the same planner on
both sides; `--planner tiny` plans with the tiny model's processor (the real `SampleEncoder`, ~8 ms a row on two
cores: use a few thousand rows).

Each figure comes from a fresh process (`harness.run_fresh`, calling `measure`) that imports the same modules on
both sides, times the mix's setup, then reads VmRSS and RssAnon once the mix is ready (after a garbage collection):
cold is the first run on an empty cache, warm a second run on the cache the first wrote, i.e. what every rank pays
once local rank 0 has prepared the data. Both sides must train the same items (number, planned lengths, and every
97th item whole); the script checks that before it prints the ratios.

    python scripts/bench/mix_memory.py                         # 200K rows, ~3 min on 2 cores
    python scripts/bench/mix_memory.py --rows 2000 --planner tiny
"""

from __future__ import annotations

import gc
import hashlib
import json
import math
import os
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from cader.scripts.bench import harness
from cader.scripts.bench.harness import status_kib
from jsonargparse import CLI

RELEASE = {"longvt_sft_videor1_165k5.parquet": 165_575, "longvt_sft_longvideoreason_5k2.parquet": 5_238,
           "longvt_sft_llavacot_54k5.parquet": 54_500, "longvt_sft_openvlthinker_2k8.parquet": 2_800,
           "longvt_sft_wemath_602.parquet": 602}
VIDEO_FILES = ("longvt_sft_videor1_165k5.parquet", "longvt_sft_longvideoreason_5k2.parquet")
TOOL_EVERY, BROKEN_EVERY, CHECK_EVERY = 97, 211, 97
WAYS = ("dicts", "arrow")


# ---- the synthetic mix ------------------------------------------------------------------------------------------

def write_media(media: Path) -> tuple[list[str], list[str]]:
    """Four small videos and four images under `media`; their paths relative to its parent (the media root)."""
    from cader.dev.synthetic.media import VideoSpec, write_image, write_video

    videos = [write_video(VideoSpec(f"v{k}", 8.0 * (k + 1), 2, 1.0, 3.0, "red", 64 + 32 * k, 48 + 16 * k),
                          media / f"v{k}.mp4") for k in range(4)]
    images = [write_image("blue", media / f"i{k}.png", 96 + 64 * k, 64 + 48 * k) for k in range(4)]
    return [p.relative_to(media.parent).as_posix() for p in videos], \
        [p.relative_to(media.parent).as_posix() for p in images]


def _text(corpus: str, rng, low: int, high: int) -> str:
    length = int(rng.integers(low, high))
    start = int(rng.integers(0, len(corpus) - length))
    return corpus[start:start + length]


def _row(index: int, media: str, is_video: bool, corpus: str, rng) -> dict:
    from cader.dev.synthetic.train_mix import longvt_part

    answer = "<think>" + _text(corpus, rng, 800, 2400) + "</think><answer>B</answer>"
    if index % TOOL_EVERY == 0:
        answer = "<tool_call>{\"name\": \"crop_video\"}</tool_call>"
    if index % BROKEN_EVERY == 0:
        answer = " "
    question = _text(corpus, rng, 200, 700) + "\nOptions:\nA. one\nB. two\nC. three\nD. four"
    return {"messages": [
        {"role": "system", "content": [longvt_part("text", "You are a helpful assistant.")]},
        {"role": "user", "content": [longvt_part("video_url" if is_video else "image_url", media),
                                     longvt_part("text", question)]},
        {"role": "assistant", "content": [longvt_part("text", answer)]}]}


def write_mix(out: Path, rows: int, seed: int = 0) -> list[tuple[str, str]]:
    """The five LongVT files under `out` (media in `out/media`); (source name, file name) of each."""
    # each file's row 0 is a broken one (BROKEN_EVERY): a file of one row would have nothing to train
    fewest = math.ceil(1.5 * sum(RELEASE.values()) / min(RELEASE.values()))
    if rows < fewest:
        raise ValueError(f"--rows {rows}: the smallest file would get one row, which is broken; use --rows {fewest} "
                         "or more")
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from cader.dev.synthetic.train_mix import longvt_features

    rng = np.random.default_rng(seed)
    videos, images = write_media(out / "media")
    words = ["the", "shape", "moves", "left", "frame", "colour", "second", "appears", "video", "then", "red"]
    corpus = " ".join(rng.choice(words, 400_000))
    schema = longvt_features().arrow_schema
    total, sources = sum(RELEASE.values()), []
    for file, share in RELEASE.items():
        n, media = max(1, round(rows * share / total)), videos if file in VIDEO_FILES else images
        with pq.ParquetWriter(out / file, schema) as writer:
            for start in range(0, n, 10_000):
                chunk = [_row(i, media[i % len(media)], file in VIDEO_FILES, corpus, rng)
                         for i in range(start, min(n, start + 10_000))]
                writer.write_table(pa.Table.from_pylist(chunk, schema=schema))
        sources.append((file.split("_")[2], file))
    return sources


# ---- the planner ------------------------------------------------------------------------------------------------

class HeaderPlanner:
    """`SampleEncoder.plan`'s budget arithmetic with each media header probed once per process and text tokens
    counted as characters / 4 (no tokenizer, no chat template)."""

    def __init__(self, budget):
        from cader.train.budget import VisionGeometry

        self.budget, self.geometry, self.specs = budget, VisionGeometry(), {}

    def spec(self, path: Path, kind: str):
        from cader.train.budget import ImageSpec, VideoSpec
        from cader.vlm.image import displayed_size
        from cader.vlm.video import VideoReader

        if path not in self.specs:
            if kind == "video":
                reader = VideoReader(path)
                self.specs[path] = VideoSpec(reader.duration, reader.height, reader.width)
            else:
                self.specs[path] = ImageSpec(*displayed_size(path))
        return self.specs[path]

    def plan(self, sample, media_root):
        from cader.train.budget import VideoSpec, plan_budget
        from cader.train.collate import PlannedSample, SkipSample

        specs = []
        for m in sample.media:
            path = Path(media_root) / m["path"]
            if not path.is_file():
                raise SkipSample("missing_media", f"{sample.sample_id}: {path} not found")
            specs.append(self.spec(path, m["type"]))
        prompt = sum(len(t.text) for t in sample.turns[:-1]) // 4 + 8 * len(sample.turns)
        target = len(sample.turns[-1].text) // 4 + 2
        plan = plan_budget(prompt, target, [s for s in specs if isinstance(s, VideoSpec)],
                           [s for s in specs if not isinstance(s, VideoSpec)], self.budget, self.geometry)
        if not plan.keep:
            raise SkipSample("over_budget", f"{sample.sample_id}: {plan.reason}")
        return PlannedSample(sample, str(media_root), plan, plan.total_tokens)


def _module_class():
    from cader.train.datamodule import SFTDataModule

    class HeaderPlannedMix(SFTDataModule):
        """SFTDataModule with the header planner in place of the processor's encoder."""

        def _encoder(self):
            return HeaderPlanner(self.budget)

        def _fingerprint(self, encoder):
            return {"planner": "headers"}

    return HeaderPlannedMix


# ---- one measurement, in a fresh process ------------------------------------------------------------------------

def _items_digest(items) -> str:
    """Number and planned length of every item, and every CHECK_EVERY-th item whole."""
    sha = hashlib.sha256(json.dumps([int(item.num_tokens) for item in items]).encode())
    for k in range(0, len(items), CHECK_EVERY):
        item = items[k]
        sha.update(json.dumps([item.sample.sample_id, [[t.role, t.parts] for t in item.sample.turns],
                               asdict(item.plan), item.media_root]).encode())
    return sha.hexdigest()[:16]


def _build(way: str, data: Path, sources: list, cache: str, workers: int, planner: str, model_dir: str | None):
    from cader.train.datamodule import SFTDataModule, Source

    kw = {"max_length": 10_240, "plan_workers": workers, "report_dir": str(Path(cache) / "report")}
    if planner == "tiny":
        module = SFTDataModule(**kw, sources=[], processor_path=model_dir)
        encoder, processor = module._encoder(), None
    else:
        module = _module_class()(**kw, sources=[])
        encoder, processor = module._encoder(), {"planner": "headers"}
    start = time.perf_counter()
    if way == "dicts":
        from cader.scripts.bench import dict_mix
        from cader.train.plan_cache import processor_fingerprint

        processor = processor or processor_fingerprint(encoder)
        srcs = [dict_mix.DictSource(name, "longvt", data / file, str(data)) for name, file in sources]
        items, _ = dict_mix.build_items(srcs, encoder, module.budget, cache_dir=cache, processor=processor,
                                        workers=workers)
        return items, time.perf_counter() - start
    module.sources = [Source(name, "longvt", str(data / file)) for name, file in sources]
    module.plan_cache_dir = cache
    module.setup("fit")
    return module.items, time.perf_counter() - start


def measure(way: str, data: str, sources: list, cache: str, workers: int, planner: str,
            model_dir: str | None = None) -> dict:
    import cader.train.datamodule  # noqa: F401 -- both sides start from the same imports

    gc.collect()
    before = {"rss_before_mib": round(status_kib("VmRSS") / 1024, 1),
              "anon_before_mib": round(status_kib("RssAnon") / 1024, 1)}
    items, seconds = _build(way, Path(data), sources, cache, workers, planner, model_dir)
    gc.collect()
    return {"seconds": round(seconds, 2), "rss_mib": round(status_kib("VmRSS") / 1024, 1),
            "rss_anon_mib": round(status_kib("RssAnon") / 1024, 1), **before, "items": len(items),
            "digest": _items_digest(items)}


def run_fresh(**kwargs) -> dict:
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    return harness.run_fresh("cader.scripts.bench.mix_memory:measure", kwargs, env=env)


# ---- the benchmark ----------------------------------------------------------------------------------------------

def main(rows: int = 200_000, workers: int | None = None, planner: str = "headers", work_dir: str | None = None
         ) -> dict:
    """Measure both mixes cold and warm, each in a fresh process, and print the ratios.

    Args:
        rows: rows of the synthetic mix (over the five files).
        workers: plan_workers of both sides (threads before, processes now; default: SFTDataModule's).
        planner: "headers" (budget arithmetic, headers probed once per file) or "tiny" (the tiny model's
            processor, the real SampleEncoder; slow: use a few thousand rows).
        work_dir: keep the mix and caches here (default: a temporary folder, removed at the end).
    """
    from cader.train.plan_cache import default_plan_workers

    workers = workers or default_plan_workers()
    with tempfile.TemporaryDirectory(prefix="cader_mix_memory_") as tmp:
        root = Path(work_dir or tmp)
        data, model_dir = root / "data", None
        data.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        sources = write_mix(data, rows)
        if planner == "tiny":
            from cader.dev.tiny import make_tiny_model

            model_dir = str(make_tiny_model(root / "model"))
        print(f"mix of {rows} rows written in {time.perf_counter() - start:.1f} s", file=sys.stderr)
        runs = {}
        for way in WAYS:
            for phase in ("cold", "warm"):
                runs[f"{way}_{phase}"] = run_fresh(way=way, data=str(data), sources=sources,
                                                   cache=str(root / f"cache_{way}"), workers=workers,
                                                   planner=planner, model_dir=model_dir)
                print(f"{way} {phase}: {runs[f'{way}_{phase}']}", file=sys.stderr)
    if len({r["digest"] for r in runs.values()}) != 1:
        raise AssertionError(f"the two mixes train different items: {runs}")
    return _summary(rows, workers, planner, runs)


def _summary(rows: int, workers: int, planner: str, runs: dict) -> dict:
    old, new = runs["dicts_warm"], runs["arrow_warm"]
    result = {
        "rows": rows, "items": new["items"], "workers": workers, "planner": planner, "runs": runs,
        "rss_arrow_over_dicts": round(new["rss_mib"] / old["rss_mib"], 3),
        "mix_mib": {way: round(runs[f"{way}_warm"]["rss_mib"] - runs[f"{way}_warm"]["rss_before_mib"], 1)
                    for way in WAYS},
        "warm_arrow_over_dicts": round(new["seconds"] / old["seconds"], 3),
        "cold_arrow_over_dicts": round(runs["arrow_cold"]["seconds"] / runs["dicts_cold"]["seconds"], 3),
    }
    print(f"mix of {rows} rows ({new['items']} items): RSS per rank once ready {old['rss_mib']:.0f} MiB as "
          f"Python objects, {new['rss_mib']:.0f} MiB as Arrow tables (x{result['rss_arrow_over_dicts']}; the mix "
          f"itself {result['mix_mib']['dicts']:.0f} -> {result['mix_mib']['arrow']:.0f} MiB); setup cold "
          f"{runs['dicts_cold']['seconds']:.1f} -> {runs['arrow_cold']['seconds']:.1f} s, warm "
          f"{old['seconds']:.1f} -> {new['seconds']:.1f} s (x{result['warm_arrow_over_dicts']})")
    return result


if __name__ == "__main__":
    CLI(main, as_positional=False)
