"""Multi-node launch as documented (docs/walkthrough.md, "Multi-node"): the same command on every node with MASTER_ADDR,
MASTER_PORT and NODE_RANK set, `--trainer.num_nodes 2 --trainer.devices 1`. Here the two "nodes" are two processes
on loopback over gloo, with the CPU DeepSpeed strategy; each must see world size 2, its own global rank, and its
own half of the data."""
import json
import subprocess
import sys
import textwrap

import pytest
from test_train_zero3_multiprocess import _clean_environ, _free_port, _write_mix

SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path

    import lightning as L
    from cader.train.datamodule import SFTDataModule, Source
    from cader.train.module import SFTModule
    from cader.train.strategies import CPUDeepSpeedStrategy

    model_dir, data_file, root = sys.argv[1:4]


    class Seen(L.Callback):
        def on_train_start(self, trainer, module):
            self.steps = []

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            self.steps.append({"tokens": int(batch["attention_mask"].sum()), "loss": float(outputs["loss"])})

        def on_train_end(self, trainer, module):
            info = {"global_rank": trainer.global_rank, "world_size": trainer.world_size,
                    "node_rank": trainer.node_rank, "steps": self.steps}
            Path(root, f"node{trainer.node_rank}.json").write_text(json.dumps(info))


    dm = SFTDataModule([Source("mix", "sharegpt", data_file)], processor_path=model_dir, batch_size=1,
                       max_length=1024, report_dir=root)
    trainer = L.Trainer(default_root_dir=root, accelerator="cpu", devices=1, num_nodes=2,
                        strategy=CPUDeepSpeedStrategy("zero2"), precision="32-true", max_steps=2, max_epochs=2,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, use_distributed_sampler=False, callbacks=[Seen()])
    trainer.fit(SFTModule(model_dir, lr=1e-3), datamodule=dm)
    """
)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_nodes_one_device_each_over_loopback(tiny_model_dir, tmp_path):
    pytest.importorskip("deepspeed")
    data = _write_mix(tmp_path)
    script = tmp_path / "two_nodes.py"
    script.write_text(SCRIPT)
    root = tmp_path / "run"
    root.mkdir()
    for _ in range(3):  # a free port can be taken before node 0 binds it: retry
        port = str(_free_port())
        procs = []
        for node in (0, 1):
            env = {**_clean_environ(), "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1",
                   "TOKENIZERS_PARALLELISM": "false", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port,
                   "NODE_RANK": str(node)}
            procs.append(subprocess.Popen([sys.executable, str(script), str(tiny_model_dir), str(data), str(root)],
                                          cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True))
        outs = [p.communicate(timeout=240) for p in procs]
        if not any("EADDRINUSE" in err for _, err in outs):
            break
    for proc, (_, err) in zip(procs, outs):
        assert proc.returncode == 0, err[-4000:]
    nodes = [json.loads((root / f"node{n}.json").read_text()) for n in (0, 1)]
    assert [n["world_size"] for n in nodes] == [2, 2]
    assert [(n["node_rank"], n["global_rank"]) for n in nodes] == [(0, 0), (1, 1)]
    assert [len(n["steps"]) for n in nodes] == [2, 2]
    # the two samples of the mix (text only, video) are split between the nodes in every step
    for a, b in zip(nodes[0]["steps"], nodes[1]["steps"]):
        assert a["tokens"] != b["tokens"]
